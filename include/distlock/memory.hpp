// distlock/memory.hpp: the in-process store and fenced register.
#pragma once

#include <distlock/detail/push_warnings.hpp>

#include <distlock/util/config.hpp>
#include <distlock/memory/fenced_register.hpp>
#include <distlock/memory/session_store.hpp>
#include <distlock/memory/store.hpp>

#include <distlock/detail/pop_warnings.hpp>

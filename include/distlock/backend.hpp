// distlock/backend.hpp: the store authors' tier in one include: the store contract,
// store_ref and the lifetime, the store shell, the helpers, and the vocabulary a store
// speaks (errors, results, the clock, options, owner tokens, diagnostics). A store's
// headers include this, transport/, the codecs and their own folder
// (docs/architecture.md, "Writing a store").
#pragma once

#include <distlock/backend/contract.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/helpers.hpp>
#include <distlock/backend/lifetime.hpp>
#include <distlock/backend/store_ref.hpp>
#include <distlock/backend/store_shell.hpp>
#include <distlock/clock.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/owner_token.hpp>
#include <distlock/result.hpp>

// distlock/store.hpp: the store contract, for users who write their own acquisition
// policies or stores (the concepts live in the store authors' tier).
#pragma once

#include <distlock/backend/contract.hpp>
#include <distlock/backend/store_ref.hpp>

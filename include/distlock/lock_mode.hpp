// distlock/lock_mode.hpp: how a grant is held, in a header of its own so that the
// codecs and key layouts that name it compile without coroutines (the fuzzers).
#pragma once

namespace distlock {

/// How a grant is held: alone (a writer), or beside other shared holders (a reader of
/// a shared mutex, a semaphore's permit).
enum class lock_mode { exclusive, shared };

} // namespace distlock

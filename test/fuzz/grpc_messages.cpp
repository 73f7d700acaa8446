// libFuzzer target: a gRPC response body as etcd's server would send it, in any
// pieces: the deframer splits it into messages, and each message is decoded by every
// answer schema the etcd store reads, then by the store's reply readers. Nothing may
// throw, crash or read past the bytes; a decoded document must encode back to bytes
// that decode to the same document (the two directions agree).
#include <distlock/etcd/detail/messages.hpp>
#include <distlock/etcd/detail/replies.hpp>
#include <distlock/grpc/framing.hpp>
#include <distlock/protobuf/json_mapping.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

namespace pb = distlock::protobuf;
namespace msg = distlock::etcd::detail::messages;
namespace etcd = distlock::etcd::detail;

[[noreturn]] void fail(const char* schema, const char* what)
{
    std::fprintf(stderr, "%s: %s\n", schema, what);
    std::abort();
}

void decode_all(std::string_view bytes)
{
    for (const auto& rpc : msg::rpcs) {
        const auto doc = pb::decode(*rpc.response, bytes);
        if (!doc)
            continue;
        const auto again = pb::encode(*rpc.response, doc.value());
        if (!again)
            fail(rpc.response->name.data(), "a decoded document does not encode");
        const auto back = pb::decode(*rpc.response, again.value());
        if (!back || back.value() != doc.value())
            fail(rpc.response->name.data(), "encode and decode disagree");
        (void)etcd::decode_range(doc.value(), nullptr);
        (void)etcd::decode_revision(doc.value(), nullptr);
        (void)etcd::decode_txn(doc.value(), nullptr, {0}, {0});
        (void)etcd::decode_watch(doc.value(), nullptr);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view input{reinterpret_cast<const char*>(data), size};
    try {
        // The whole input as one message, and as a body of frames split at its first byte.
        decode_all(input);
        distlock::grpc::deframer d;
        const std::size_t split = size > 0 ? data[0] % (size + 1) : 0;
        std::string m;
        std::string why;
        for (auto part : {input.substr(0, split), input.substr(split)}) {
            d.append(part);
            for (;;) {
                const auto s = d.next(m, why);
                if (s == distlock::grpc::deframer::status::message) {
                    if (m.size() > size)
                        fail("deframer", "a message longer than its input");
                    decode_all(m);
                    continue;
                }
                break;
            }
        }
    } catch (const std::exception& e) {
        fail("grpc_messages", e.what());
    }
    return 0;
}

// libFuzzer target: ZooKeeper's frames and answers (jute) on arbitrary bytes must
// never crash, read out of bounds, claim more bytes than they were given, or
// allocate more than the input could hold. A holder's node's data of any bytes reads
// as a mark, a value or neither, never a crash, and a value read is one a proclaim writes.
#include <distlock/zookeeper/detail/election.hpp>
#include <distlock/zookeeper/proto/codec.hpp>
#include <distlock/zookeeper/proto/messages.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    namespace zk = distlock::zookeeper::proto;
    const std::string_view in{reinterpret_cast<const char*>(data), size};
    const zk::codec codec{.max_frame = 1 << 16};
    std::size_t at = 0;
    while (at < in.size()) {
        const auto d = codec.decode(in.substr(at));
        if (d.status != distlock::transport::decode_status::complete)
            break;
        if (d.consumed == 0 || d.consumed > in.size() - at)
            std::abort();
        at += d.consumed;
        // Every answer body a lock reads, whatever the request was.
        (void)zk::parse_create2(d.message.body);
        (void)zk::parse_stat(d.message.body);
        (void)zk::parse_get_children2(d.message.body);
        (void)zk::parse_event(d.message.body);
        // A multi's answer (a lock-delay's mark with its node): bounded, whatever comes.
        if (const auto results = zk::parse_multi(d.message.body); results && results->size() > 64)
            std::abort();
        if (const auto node = zk::parse_get_data(d.message.body)) {
            namespace zkd = distlock::zookeeper::detail;
            const auto v = zkd::value_of(node->data, node->stat.version);
            if (v.value && (v.unreadable || v.value->size() > distlock::max_leader_value_size ||
                            zkd::proclaimed_data(*v.value) != node->data))
                std::abort();
        }
    }
    const zk::connect_codec connect{.max_frame = 1 << 16};
    const auto c = connect.decode(in);
    if (c.status == distlock::transport::decode_status::complete && (c.consumed == 0 || c.consumed > size))
        std::abort();
    return 0;
}

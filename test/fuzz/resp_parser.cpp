// libFuzzer target for the sans-I/O RESP parser (clang: -fsanitize=fuzzer,address,undefined).
// Besides "no crash, no sanitizer report, no unbounded allocation", it checks:
//  - a complete reply never claims more bytes than it was given;
//  - parsing is deterministic and depends only on the reply's own bytes: the consumed
//    prefix parses again to the same length, and with trailing bytes appended too;
//  - every strict prefix of a complete reply asks for more (never malformed/complete);
//  - the cluster readers (CLUSTER SLOTS, MOVED/ASK, Sentinel's primary address) take
//    any complete reply and either refuse it or give a map whose every slot owner
//    names one of its primaries.
// Run by `./dev test` for a bounded time; longer runs: see docs/architecture.md.
#include <distlock/redis/detail/cluster.hpp>
#include <distlock/redis/resp/parser.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace resp = distlock::redis::resp;
namespace cluster = distlock::redis::detail;

static void read_as_cluster_reply(const resp::value& v)
{
    const distlock::redis::node_address answering{"127.0.0.1", 7000};
    if (auto map = cluster::parse_cluster_slots(v, answering)) {
        if (map->primaries.empty() || map->primaries.size() != map->primary_ids.size())
            __builtin_trap();
        for (const auto owner : map->owner)
            if (owner < -1 || owner >= static_cast<int>(map->primaries.size()))
                __builtin_trap();
        (void)map->identity();
        map->move(0, {"127.0.0.2", 7001});
        if (!map->node_for(0) || map->node_for(0)->port != 7001)
            __builtin_trap();
    }
    if (auto a = cluster::parse_master_address(v); a && (a->host.empty() || a->port == 0))
        __builtin_trap();
    if (v.type == resp::type::error || v.type == resp::type::simple_string) {
        if (auto r = cluster::parse_redirect(v.text, answering); r && (r->slot >= cluster::slot_count || r->to.port == 0))
            __builtin_trap();
        (void)cluster::is_transient_refusal(v.text);
    }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view in{reinterpret_cast<const char*>(data), size};
    const auto r = resp::parse(in);
    if (r.status != resp::status::complete)
        return 0;
    if (r.consumed == 0 || r.consumed > size)
        __builtin_trap();
    const auto reply = in.substr(0, r.consumed);
    read_as_cluster_reply(r.value);
    const auto again = resp::parse(reply);
    if (again.status != resp::status::complete || again.consumed != r.consumed)
        __builtin_trap();
    const auto more = resp::parse(std::string{reply} + "+trailing\r\n");
    if (more.status != resp::status::complete || more.consumed != r.consumed)
        __builtin_trap();
    // Strict prefixes (a sample, to keep each run fast).
    for (std::size_t cut = r.consumed - 1; cut + 64 > r.consumed && cut > 0; --cut)
        if (resp::parse(reply.substr(0, cut)).status != resp::status::need_more)
            __builtin_trap();
    return 0;
}

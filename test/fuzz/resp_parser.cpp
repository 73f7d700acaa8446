// libFuzzer target for the sans-I/O RESP parser (clang: -fsanitize=fuzzer,address,undefined).
// Besides "no crash, no sanitizer report, no unbounded allocation", it checks:
//  - a complete reply never claims more bytes than it was given;
//  - parsing is deterministic and depends only on the reply's own bytes: the consumed
//    prefix parses again to the same length, and with trailing bytes appended too;
//  - every strict prefix of a complete reply asks for more (never malformed/complete);
//  - the cluster readers (CLUSTER SLOTS, MOVED/ASK, Sentinel's primary address) take
//    any complete reply and either refuse it or give a map whose every slot owner
//    names one of its primaries;
//  - the reader of a fair release's hand-over message takes any text and either
//    refuses it or gives a try and a token from 1 and a time below 2^53 us that reads
//    back as the same text.
// Run by `./dev test` for a bounded time; longer runs: see docs/architecture.md.
#include <distlock/redis/detail/cluster.hpp>
#include <distlock/redis/detail/handover.hpp>
#include <distlock/redis/resp/parser.hpp>

#include <cstddef>
#include <cstdint>
#include <chrono>
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

static void read_as_handover(std::string_view text)
{
    const auto h = cluster::parse_handover(text);
    if (!h)
        return;
    if (h->try_number == 0 || h->fence == 0 || h->after_try.count() < 0)
        __builtin_trap();
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(h->after_try).count();
    // Leading zeros read as the same numbers: compare the numbers, written back.
    const auto again = cluster::parse_handover(std::to_string(h->try_number) + ":" + std::to_string(h->fence) +
                                               ":" + std::to_string(us));
    if (!again || again->try_number != h->try_number || again->fence != h->fence || again->after_try != h->after_try)
        __builtin_trap();
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view in{reinterpret_cast<const char*>(data), size};
    read_as_handover(in);
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

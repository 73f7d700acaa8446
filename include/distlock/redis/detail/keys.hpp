// distlock/redis/detail/keys.hpp: the Redis store's key layout, without I/O: which
// keys and channels a resource's lock, queue, fence and election value live in. Pure
// functions over strings, unit-tested and fuzzed for injectivity
// (test/fuzz/key_layouts.cpp).
#pragma once

#include <distlock/redis/detail/cluster.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace distlock::redis::detail {

/// The keys of one store: built from its key prefix, whether ids may carry a hash
/// tag of their own, and whether locks follow the plain Redlock recipe
/// (config::key_prefix, config::hash_tags, config::dialect).
class key_layout {
public:
    key_layout(std::string_view prefix, bool hash_tags, bool plain = false) : hash_tags_{hash_tags}, plain_{plain}
    {
        append_escaped(escaped_prefix_, prefix);
    }

    /// Whether locks follow the plain Redlock recipe (redis::dialect::plain).
    bool plain() const noexcept { return plain_; }

    /// A resource's lock key: key(resource, "lock"), or under the plain layout the id
    /// itself, which is what other Redlock clients are given as the resource.
    std::string lock_key(std::string_view resource) const
    {
        return plain_ ? std::string{resource} : key(resource, "lock");
    }

    // The plain layout's keys and channels of distlock's own beside a lock key
    // (its holder, its release channel): <prefix>:{S}:<kind>:<resource>, prefix and
    // resource escaped as in key(), S the tag detail::slot_tags gives the lock key's
    // hash slot. Why S and not the id's own hash tag: an id may have none, or one
    // that is not valid, and Redis then hashes the whole id; the slot's tag puts
    // these keys in the lock key's slot whatever the id (a script's keys must share
    // one slot in a Redis Cluster), and the escaped id after it keeps one key per
    // (prefix, resource): the only '{' of the key is the tag's, and the kind ends at
    // the next ':' (kinds have none).
    std::string beside(std::string_view resource, std::string_view kind) const
    {
        const auto tag = detail::slot_tags::table()[hash_slot(resource)];
        std::string k;
        k.reserve(escaped_prefix_.size() + tag.size() + kind.size() + escaped_size(resource) + 6);
        k.append(escaped_prefix_).append(":{").append(tag).append("}:").append(kind).push_back(':');
        append_escaped(k, resource);
        return k;
    }

    /// Where an election on `resource` keeps its leader's value (basic_leader_election):
    /// key(resource, "leader"), or under the plain layout beside(resource, "leader"),
    /// so that it lies in the lock key's hash slot in both (the scripts that check the
    /// holder and write or read the value take both keys).
    std::string leader_key(std::string_view resource) const
    {
        return plain_ ? beside(resource, "leader") : key(resource, "leader");
    }

    /// Where a lock-delay mark of `resource`'s grant, then its tombstone, lives:
    /// key(resource, "delay"), or under the plain layout beside(resource, "delay"), in
    /// the lock key's hash slot in both. The scripts take its name as an argument, not
    /// as a key (scripts.hpp: a declared key that does not exist is refused while a
    /// Cluster slot migrates).
    std::string delay_key(std::string_view resource) const
    {
        return plain_ ? beside(resource, "delay") : key(resource, "delay");
    }

    /// The resource whose `kind` key beside() built as `key`; nullopt for any other key.
    std::optional<std::string> resource_beside(std::string_view key, std::string_view kind) const
    {
        if (!key.starts_with(escaped_prefix_))
            return std::nullopt;
        auto rest = key.substr(escaped_prefix_.size());
        if (!rest.starts_with(":{"))
            return std::nullopt;
        const auto close = rest.find('}');
        if (close == std::string_view::npos)
            return std::nullopt;
        rest.remove_prefix(close + 1);
        if (!rest.starts_with(':') || rest.substr(1, kind.size()) != kind || rest.substr(1 + kind.size(), 1) != ":")
            return std::nullopt;
        auto resource = unescaped(rest.substr(kind.size() + 2));
        if (!resource || beside(*resource, kind) != key)
            return std::nullopt;
        return resource;
    }

    /// A SCAN MATCH pattern that every `kind` key beside() builds for an id beginning
    /// with `resource_prefix` matches (resource_beside() has the last word).
    std::string pattern_beside(std::string_view resource_prefix, std::string_view kind) const
    {
        std::string p;
        append_glob_literal(p, escaped_prefix_);
        p.append(":{*}:");
        append_glob_literal(p, kind);
        p.push_back(':');
        std::string escaped;
        append_escaped(escaped, resource_prefix);
        append_glob_literal(p, escaped);
        p.push_back('*');
        return p;
    }

    /// Under the plain layout, whether an id would be a key of distlock's own (it
    /// begins as every key of the prefix does: "<prefix>:{"): such an id is refused,
    /// or its lock could overwrite a fencing token or another lock's holder.
    bool reserved(std::string_view resource) const
    {
        return plain_ && resource.starts_with(escaped_prefix_) &&
               resource.substr(escaped_prefix_.size()).starts_with(":{");
    }

    // <prefix>:{#<resource>}:<kind>, with '%', '{' and '}' percent-encoded in both the
    // prefix and the resource. Why: the layout must be injective over (prefix,
    // resource), or two stores with different prefixes could share a lock (prefix "a"
    // with id "b:{#c" and prefix "a:{#b" with id "c" used to give one key). With the
    // braces escaped, the only '{' in the key is the one added here, so a key splits
    // back into its parts at that brace and the next '}', and percent-encoding is
    // itself reversible. It also makes that pair the key's one hash tag (Redis Cluster
    // hashes from the first '{' to the next '}'), never empty thanks to '#'. Ids
    // without those three characters keep the keys they always had.
    // With config::hash_tags, an id with a tag T of its own ("{T}..." anywhere) gets
    // <prefix>:{@T}<resource>:<kind> instead: T picks the slot, the escaped id follows
    // whole, so the key still names one (prefix, resource), and '@' keeps such keys
    // apart from every untagged one.
    std::string key(std::string_view resource, std::string_view kind) const
    {
        std::string k;
        if (hash_tags_) {
            const auto open = resource.find('{');
            const auto close = open == std::string_view::npos ? open : resource.find('}', open + 1);
            if (close != std::string_view::npos && close > open + 1) {
                const auto tag = resource.substr(open + 1, close - open - 1);
                k.reserve(escaped_prefix_.size() + escaped_size(tag) + escaped_size(resource) + kind.size() + 5);
                k.append(escaped_prefix_).append(":{@");
                append_escaped(k, tag);
                k.push_back('}');
                append_escaped(k, resource);
                k.push_back(':');
                k.append(kind);
                return k;
            }
        }
        if (std::none_of(resource.begin(), resource.end(), escaped_byte)) {
            // Nearly every id: nothing to escape, so the key is written in place at its
            // final size (a set of 32 locks builds 128 keys; appending piece by piece
            // reallocates as a key grows).
            k.resize(escaped_prefix_.size() + resource.size() + kind.size() + 5);
            char* at = k.data();
            for (const std::string_view piece : {std::string_view{escaped_prefix_}, std::string_view{":{#"}, resource,
                                                 std::string_view{"}:"}, kind})
                at = std::copy(piece.begin(), piece.end(), at);
            return k;
        }
        k.reserve(escaped_prefix_.size() + escaped_size(resource) + kind.size() + 5);
        k.append(escaped_prefix_).append(":{#", 3);
        append_escaped(k, resource);
        k.append("}:", 2).append(kind);
        return k;
    }

    /// The resource whose `kind` key `key` is: key() read backwards, so that a listing
    /// finds the ids behind the keys a SCAN returns. nullopt for any key this store
    /// would not build for some id: another prefix, kind or form, a tag that is not
    /// the id's, an escape that is not one of the three.
    std::optional<std::string> resource_of(std::string_view key, std::string_view kind) const
    {
        if (!key.starts_with(escaped_prefix_))
            return std::nullopt;
        auto rest = key.substr(escaped_prefix_.size());
        if (rest.size() < 3 || !rest.starts_with(":{"))
            return std::nullopt;
        const char form = rest[2];
        rest.remove_prefix(3);
        const auto close = rest.find('}');
        if (close == std::string_view::npos)
            return std::nullopt;
        std::string_view escaped;
        if (form == '#') {
            escaped = rest.substr(0, close);
        } else if (form == '@') {
            // The tag comes first, then the whole id: the id ends where ":<kind>" begins.
            const auto id = rest.substr(close + 1);
            if (id.size() < kind.size() + 1)
                return std::nullopt;
            escaped = id.substr(0, id.size() - kind.size() - 1);
        } else {
            return std::nullopt;
        }
        auto resource = unescaped(escaped);
        // Building the key again settles everything the parse above let through (a
        // suffix, a tag, a form this store's settings would not choose).
        if (!resource || this->key(*resource, kind) != key)
            return std::nullopt;
        return resource;
    }

    /// A SCAN MATCH pattern that the `kind` key of every id beginning with
    /// `resource_prefix` matches. Others may match too (with config::hash_tags the
    /// id's place in the key depends on its tag): resource_of() has the last word.
    /// Glob characters of the prefixes match themselves.
    std::string pattern(std::string_view resource_prefix, std::string_view kind) const
    {
        std::string p;
        append_glob_literal(p, escaped_prefix_);
        if (hash_tags_) {
            p.append(":{[#@]*:");
        } else {
            p.append(":{#");
            std::string escaped;
            append_escaped(escaped, resource_prefix);
            append_glob_literal(p, escaped);
            p.append("*}:");
        }
        append_glob_literal(p, kind);
        return p;
    }

public:
    static bool escaped_byte(char c) noexcept { return c == '%' || c == '{' || c == '}'; }

    /// `part` with its escapes undone; nullopt when it holds a brace or a '%' that
    /// begins none of the three escapes (it is then no escaped text).
    static std::optional<std::string> unescaped(std::string_view part)
    {
        std::string out;
        out.reserve(part.size());
        for (std::size_t i = 0; i < part.size(); ++i) {
            const char c = part[i];
            if (c == '{' || c == '}')
                return std::nullopt;
            if (c != '%') {
                out.push_back(c);
                continue;
            }
            const auto code = part.substr(i + 1, 2);
            if (code == "25")
                out.push_back('%');
            else if (code == "7B")
                out.push_back('{');
            else if (code == "7D")
                out.push_back('}');
            else
                return std::nullopt;
            i += 2;
        }
        return out;
    }

    // Redis glob patterns give '*', '?', '[', ']' and the backslash a meaning; a
    // backslash before each makes it match itself.
    static void append_glob_literal(std::string& out, std::string_view part)
    {
        for (const char c : part) {
            if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\')
                out.push_back('\\');
            out.push_back(c);
        }
    }

    // The size of `part` once escaped: each escaped byte takes three.
    static std::size_t escaped_size(std::string_view part) noexcept
    {
        std::size_t n = part.size();
        for (const char c : part)
            n += escaped_byte(c) ? 2 : 0;
        return n;
    }

    static void append_escaped(std::string& out, std::string_view part)
    {
        std::size_t run = 0; // bytes kept as they are go in whole runs
        for (std::size_t i = 0; i < part.size(); ++i) {
            const char c = part[i];
            if (!escaped_byte(c))
                continue;
            out.append(part.data() + run, i - run);
            out.append(c == '%' ? "%25" : c == '{' ? "%7B" : "%7D", 3);
            run = i + 1;
        }
        out.append(part.data() + run, part.size() - run);
    }


    std::string fence_key_of_slot(std::uint16_t slot) const
    {
        const auto tag = detail::slot_tags::table()[slot];
        std::string k;
        k.reserve(escaped_prefix_.size() + tag.size() + 9);
        k.append(escaped_prefix_).append(":{").append(tag).append("}:fence");
        return k;
    }

private:
    std::string escaped_prefix_; // the key prefix as keys hold it
    bool hash_tags_ = false;
    bool plain_ = false;
};

} // namespace distlock::redis::detail

// The HTTP/1.1 response parser: framing by Content-Length and chunked coding, every
// prefix incomplete, bad framing refused.
#include <distlock/http/parser.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace http = distlock::http;
using distlock::transport::decode_status;

TEST_CASE("http: a response with Content-Length, and every prefix of it is incomplete", "[http]")
{
    const std::string bytes = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                              "x-amz-crc32: 2745614147\r\n\r\n{}HTTP/1.1 204 No Content\r\n\r\n";
    const auto r = http::parse_response(bytes);
    REQUIRE(r.status == decode_status::complete);
    CHECK(r.message.status == 200);
    CHECK(r.message.reason == "OK");
    CHECK(r.message.body == "{}");
    CHECK(r.message.header("content-type") == "application/json");
    CHECK(r.message.header("X-AMZ-CRC32") == "2745614147");
    CHECK_FALSE(r.message.header("missing"));
    // The next response starts where this one ended.
    const auto next = http::parse_response(std::string_view{bytes}.substr(r.consumed));
    REQUIRE(next.status == decode_status::complete);
    CHECK(next.message.status == 204);
    const auto first_len = r.consumed;
    for (std::size_t n = 0; n < first_len; ++n) {
        INFO("prefix of " << n << " bytes");
        CHECK(http::parse_response(std::string_view{bytes}.substr(0, n)).status == decode_status::need_more);
    }
}

TEST_CASE("http: chunked bodies, with extensions and trailers", "[http]")
{
    const std::string bytes = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nTrailer: x\r\n\r\n";
    const auto r = http::parse_response(bytes);
    REQUIRE(r.status == decode_status::complete);
    CHECK(r.message.body == "hello world");
    CHECK(r.consumed == bytes.size());
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        INFO("prefix of " << n << " bytes");
        CHECK(http::parse_response(std::string_view{bytes}.substr(0, n)).status == decode_status::need_more);
    }
}

TEST_CASE("http: bad framing is malformed, never guessed", "[http]")
{
    for (const char* bad : {
             "HTTP/2 200 OK\r\n\r\n",                                          // not HTTP/1.x
             "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",                  // status not digits
             "HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n",               // length not a number
             "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", // conflicting lengths
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",            // unknown coding
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", // both
             "HTTP/1.1 200 OK\r\n\r\nbody until close",                       // no framing at all
             "HTTP/1.1 200 OK\r\nBad Header: x\r\nContent-Length: 0\r\n\r\n", // space in a name
             "HTTP/1.1 200 OK\r\nno colon\r\nContent-Length: 0\r\n\r\n",
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",   // chunk size not hex
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n", // chunk without CRLF
         }) {
        INFO(bad);
        CHECK(http::parse_response(bad).status == decode_status::malformed);
    }
}

TEST_CASE("http: limits on the head and the body", "[http]")
{
    const http::limits small{.max_head = 64, .max_body = 8};
    CHECK(http::parse_response("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", small).status == decode_status::malformed);
    CHECK(http::parse_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n", small).status ==
          decode_status::malformed);
    CHECK(http::parse_response(std::string(65, 'x'), small).status == decode_status::malformed);
    CHECK(http::parse_response("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n12345678", small).status ==
          decode_status::complete);
}

TEST_CASE("http: requests are encoded with a Content-Length for their body", "[http]")
{
    const auto bytes = http::encode_request("POST", "/", {{"Host", "h:1"}, {"X-Amz-Target", "T"}}, "{}");
    CHECK(bytes == "POST / HTTP/1.1\r\nHost: h:1\r\nX-Amz-Target: T\r\nContent-Length: 2\r\n\r\n{}");
    CHECK(http::encode_request("GET", "/x", {{"Host", "h"}}, "") == "GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
}

namespace {

// Drives a stream codec as the engine does: bytes arrive in pieces, decode() reads
// from the front of what is not consumed yet. The messages, as text.
std::vector<std::string> stream_messages(const std::string& bytes, std::size_t split, bool& malformed)
{
    http::stream_codec codec;
    std::string buffer;
    std::size_t offset = 0;
    std::vector<std::string> out;
    malformed = false;
    for (const auto piece : {std::string_view{bytes}.substr(0, split), std::string_view{bytes}.substr(split)}) {
        buffer.append(piece);
        for (;;) {
            auto d = codec.decode(std::string_view{buffer}.substr(offset));
            if (d.status == decode_status::need_more)
                break;
            if (d.status == decode_status::malformed) {
                malformed = true;
                return out;
            }
            REQUIRE(d.consumed <= buffer.size() - offset);
            offset += d.consumed;
            const auto& m = d.message;
            switch (m.what) {
            case http::stream_message::kind::head:
                CHECK_FALSE(codec.is_push(m));
                out.push_back("head " + std::to_string(m.head.status) + (m.last ? " last " + m.head.body : ""));
                break;
            case http::stream_message::kind::line:
                CHECK(codec.is_push(m));
                out.push_back("line " + m.line);
                break;
            case http::stream_message::kind::end:
                CHECK(codec.is_push(m));
                out.push_back("end");
                break;
            }
        }
    }
    return out;
}

} // namespace

TEST_CASE("http: a streamed response is its head, then each line, then its end, however the bytes are split",
          "[http]")
{
    // Lines split across chunks, two lines in one chunk, a chunk without a line end,
    // extensions and a trailer.
    const std::string bytes = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "6\r\n{\"a\":1\r\n4;x=y\r\n}\n{}\r\n3\r\n\n[]\r\n2\r\n\n\n\r\n0\r\nT: v\r\n\r\n";
    const std::vector<std::string> expected{"head 200", "line {\"a\":1}", "line {}", "line []", "end"};
    for (std::size_t split = 0; split <= bytes.size(); ++split) {
        INFO("split at " << split);
        bool malformed = false;
        CHECK(stream_messages(bytes, split, malformed) == expected);
        CHECK_FALSE(malformed);
    }
}

TEST_CASE("http: a streamed response that is not chunked is one message; bad streams are malformed", "[http]")
{
    bool malformed = false;
    const std::string error = "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n{\"code\":5}";
    CHECK(stream_messages(error.substr(0, error.size() - 1), 10, malformed) ==
          std::vector<std::string>{"head 404 last {\"code\":5"});
    CHECK_FALSE(malformed);
    // Bytes after the end of the stream, an informational head, a bad chunk size, a
    // chunk without its CRLF, a chunk over the body limit.
    for (const std::string bad : {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nX",
                                  "HTTP/1.1 100 Continue\r\n\r\n",
                                  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                                  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
                                  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFF\r\n",
                                  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nextra"}) {
        INFO(bad);
        (void)stream_messages(bad, bad.size() / 2, malformed);
        CHECK(malformed);
    }
    // A line that keeps growing past the body limit.
    http::stream_codec codec;
    codec.bounds.max_body = 8;
    std::string big = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    auto head = codec.decode(big);
    REQUIRE(head.status == decode_status::complete);
    big = "5\r\nabcde\r\n5\r\nfghij\r\n";
    CHECK(codec.decode(big).status == decode_status::malformed);
}

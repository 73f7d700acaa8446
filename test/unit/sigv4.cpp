// AWS Signature Version 4 against AWS's published examples: each step's output must
// match exactly (DynamoDB-compatible test servers do not check signatures, so these
// are the only proof that a real endpoint would accept ours).
#include <distlock/aws/sigv4.hpp>

#include <catch2/catch.hpp>

namespace aws = distlock::aws;

namespace {

constexpr const char* example_secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

} // namespace

TEST_CASE("sigv4: AWS's get-vanilla example, step by step", "[sigv4]")
{
    const aws::request r{.method = "GET",
                         .path = "/",
                         .query = {},
                         .headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
                         .payload = ""};
    const aws::scope s{"20150830T123600Z", "us-east-1", "service"};
    const auto canonical = aws::canonical_request(r);
    CHECK(canonical == "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
                       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(aws::string_to_sign(s, canonical) == "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/"
                                               "aws4_request\n"
                                               "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
    CHECK(aws::authorization(r, "AKIDEXAMPLE", example_secret, s) ==
          "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
          "SignedHeaders=host;x-amz-date, "
          "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST_CASE("sigv4: AWS's IAM ListUsers example: query, content type, signing key", "[sigv4]")
{
    const aws::request r{.method = "GET",
                         .path = "/",
                         .query = {{"Version", "2010-05-08"}, {"Action", "ListUsers"}}, // sorted by the signer
                         .headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
                                     {"Host", "iam.amazonaws.com"},
                                     {"X-Amz-Date", "20150830T123600Z"}},
                         .payload = ""};
    const aws::scope s{"20150830T123600Z", "us-east-1", "iam"};
    const auto canonical = aws::canonical_request(r);
    CHECK(canonical == "GET\n/\nAction=ListUsers&Version=2010-05-08\n"
                       "content-type:application/x-www-form-urlencoded; charset=utf-8\n"
                       "host:iam.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
                       "content-type;host;x-amz-date\n"
                       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const auto to_sign = aws::string_to_sign(s, canonical);
    CHECK(to_sign == "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/iam/aws4_request\n"
                     "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59");
    const auto key = aws::signing_key(example_secret, s);
    CHECK(aws::hex(key) == "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");
    CHECK(aws::signature(key, to_sign) == "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7");
}

TEST_CASE("sigv4: AWS's 2011 suite: a repeated query key ordered by value, a Date header", "[sigv4]")
{
    const aws::request r{.method = "GET",
                         .path = "/",
                         .query = {{"foo", "Zoo"}, {"foo", "aha"}},
                         .headers = {{"Date", "Mon, 09 Sep 2011 23:36:00 GMT"}, {"Host", "host.foo.com"}},
                         .payload = ""};
    const aws::scope s{"20110909T233600Z", "us-east-1", "host"};
    const auto canonical = aws::canonical_request(r);
    CHECK(canonical == "GET\n/\nfoo=Zoo&foo=aha\ndate:Mon, 09 Sep 2011 23:36:00 GMT\nhost:host.foo.com\n\n"
                       "date;host\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const auto to_sign = aws::string_to_sign(s, canonical);
    CHECK(to_sign == "AWS4-HMAC-SHA256\n20110909T233600Z\n20110909/us-east-1/host/aws4_request\n"
                     "e25f777ba161a0f1baf778a87faf057187cf5987f17953320e3ca399feb5f00d");
    CHECK(aws::signature(aws::signing_key(example_secret, s), to_sign) ==
          "be7148d34ebccdc6423b19085378aa0bee970bdc61d144bd1a8c48c33079ab09");
}

TEST_CASE("sigv4: header values are trimmed and collapsed, repeated headers joined, names sorted", "[sigv4]")
{
    const aws::request r{.method = "POST",
                         .path = "/a b/c",
                         .query = {{"k=", "v w"}},
                         .headers = {{"X-B", "  one   two  "}, {"x-a", "1"}, {"X-B", "three"}},
                         .payload = "{}"};
    const auto canonical = aws::canonical_request(r);
    CHECK(canonical.starts_with("POST\n/a%20b/c\nk%3D=v%20w\nx-a:1\nx-b:one two,three\n\nx-a;x-b\n"));
    CHECK(canonical.ends_with(aws::hex(aws::sha256("{}"))));
    CHECK(aws::signed_headers(r) == "x-a;x-b");
    CHECK(aws::uri_encode("~az-_.09/\xff", false) == "~az-_.09%2F%FF");
}

// SigV4 against the worked examples in AWS's S3 documentation ("Signature
// Calculations for the Authorization Header: Transferring Payload in a Single
// Chunk"): the documented example key, bucket "examplebucket", region
// us-east-1, time 20130524T000000Z. Each expected value is the one printed
// there, so a mistake in any step (encoding, sorting, trimming, key
// derivation) changes the signature.
#include "remote/sigv4.h"

#include <gtest/gtest.h>

namespace tensorsafe::internal::s3 {
namespace {

const Credentials kExampleKey{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};

SigningInput Example(std::string method, std::string uri) {
  SigningInput in;
  in.method = std::move(method);
  in.canonical_uri = std::move(uri);
  in.amz_date = "20130524T000000Z";
  in.region = "us-east-1";
  in.payload_hash = std::string(kEmptySha256);
  in.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
                {"x-amz-date", "20130524T000000Z"},
                {"x-amz-content-sha256", std::string(kEmptySha256)}};
  return in;
}

TEST(SigV4Test, GetObjectWithRange) {
  SigningInput in = Example("GET", "/test.txt");
  in.headers.emplace_back("Range", "bytes=0-9");
  const Signature s = SignV4(in, kExampleKey);
  EXPECT_EQ(s.canonical_request,
            "GET\n/test.txt\n\n"
            "host:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\n"
            "host;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4Test, PutObjectWithPayloadAndEncodedKey) {
  const std::string body = "Welcome to Amazon S3.";
  EXPECT_EQ(Sha256Hex(body), "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  // The key "test$file.text": '$' is percent-encoded in the path.
  SigningInput in = Example("PUT", "/" + UriEncode("test$file.text", true));
  EXPECT_EQ(in.canonical_uri, "/test%24file.text");
  in.payload_hash = Sha256Hex(body);
  in.headers = {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                {"Host", "examplebucket.s3.amazonaws.com"},
                {"x-amz-date", "20130524T000000Z"},
                {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                {"x-amz-content-sha256", in.payload_hash}};
  const Signature s = SignV4(in, kExampleKey);
  EXPECT_EQ(s.signed_headers, "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");
  EXPECT_EQ(s.string_to_sign.substr(s.string_to_sign.rfind('\n') + 1),
            "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  EXPECT_EQ(s.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4Test, GetBucketLifecycleSubresource) {
  SigningInput in = Example("GET", "/");
  in.query = {{"lifecycle", ""}};
  const Signature s = SignV4(in, kExampleKey);
  EXPECT_NE(s.canonical_request.find("\nlifecycle=\n"), std::string::npos) << s.canonical_request;
  EXPECT_EQ(s.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4Test, ListObjectsQuerySortedByName) {
  SigningInput in = Example("GET", "/");
  in.query = {{"prefix", "J"}, {"max-keys", "2"}};  // given unsorted on purpose
  const Signature s = SignV4(in, kExampleKey);
  EXPECT_NE(s.canonical_request.find("\nmax-keys=2&prefix=J\n"), std::string::npos) << s.canonical_request;
  EXPECT_EQ(s.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

// The key-derivation example of the general SigV4 documentation (service iam).
TEST(SigV4Test, DerivedSigningKey) {
  EXPECT_EQ(SigningKeyHex("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam"),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
}

TEST(SigV4Test, HeaderValuesTrimmedAndFolded) {
  SigningInput a = Example("GET", "/k");
  SigningInput b = a;
  a.headers.emplace_back("X-Amz-Meta-Note", "a b c");
  b.headers.emplace_back("x-amz-meta-note", "  a   b\tc ");
  EXPECT_EQ(SignV4(a, kExampleKey).signature, SignV4(b, kExampleKey).signature);
}

TEST(SigV4Test, UriEncoding) {
  EXPECT_EQ(UriEncode("a b/c~d_e.f-g", true), "a%20b/c~d_e.f-g");
  EXPECT_EQ(UriEncode("a b/c", false), "a%20b%2Fc");
  EXPECT_EQ(UriEncode("\xc3\xa9+=", false), "%C3%A9%2B%3D");
  EXPECT_EQ(CanonicalQuery({{"uploads", ""}}), "uploads=");
  EXPECT_EQ(CanonicalQuery({{"b", "x y"}, {"a", "2"}, {"a", "1"}}), "a=1&a=2&b=x%20y");
}

TEST(SigV4Test, AmzDateIsUtc) {
  // 2013-05-24T00:00:00Z = 1369353600 s after the epoch.
  EXPECT_EQ(AmzDate(std::chrono::system_clock::from_time_t(1369353600)), "20130524T000000Z");
}

}  // namespace
}  // namespace tensorsafe::internal::s3

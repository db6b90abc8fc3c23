// Credentials, region and endpoint found as the AWS CLI finds them, from a
// fake environment and real files in a temp directory.
#include "remote/s3_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "support/temp_dir.h"

namespace tensorsafe::internal::s3 {
namespace {

using ::testing::HasSubstr;

class S3ConfigTest : public ::testing::Test {
 protected:
  Result<S3Config> Resolve() {
    return ResolveS3Config([this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    });
  }
  void Write(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((tmp_.path() / rel).parent_path());
    std::ofstream(tmp_.path() / rel) << text;
  }
  void SetUp() override { env_["HOME"] = tmp_.path().string(); }

  tensorsafe::testing::TempDir tmp_;
  std::map<std::string, std::string> env_;
};

TEST_F(S3ConfigTest, EnvironmentWinsOverProfile) {
  Write(".aws/credentials", "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n");
  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env_["AWS_SECRET_ACCESS_KEY"] = "ENVSECRET";
  env_["AWS_SESSION_TOKEN"] = "TOKEN";
  auto c = Resolve();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->credentials.access_key_id, "ENVKEY");
  EXPECT_EQ(c->credentials.secret_access_key, "ENVSECRET");
  EXPECT_EQ(c->credentials.session_token, "TOKEN");
  EXPECT_EQ(c->credentials_source, "environment");
  EXPECT_EQ(c->region, "us-east-1");
  EXPECT_TRUE(c->endpoint.empty());
  EXPECT_FALSE(c->path_style);
}

TEST_F(S3ConfigTest, NamedProfileFromSharedFilesWithComments) {
  Write(".aws/credentials",
        "# comment\n[default]\naws_access_key_id=D\naws_secret_access_key=DS\n\n"
        "[train]\n; another\naws_access_key_id = TK \naws_secret_access_key = TS\naws_session_token = TT\n");
  Write(".aws/config",
        "[default]\nregion = eu-west-1\n[profile train]\nregion = ap-south-1\n"
        "endpoint_url = http://127.0.0.1:9000\n");
  env_["AWS_PROFILE"] = "train";
  auto c = Resolve();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->credentials.access_key_id, "TK");
  EXPECT_EQ(c->credentials.secret_access_key, "TS");
  EXPECT_EQ(c->credentials.session_token, "TT");
  EXPECT_EQ(c->region, "ap-south-1");
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:9000");
  EXPECT_TRUE(c->path_style);
  EXPECT_THAT(c->credentials_source, HasSubstr("profile train in " + tmp_.path().string() + "/.aws/credentials"));
}

TEST_F(S3ConfigTest, SharedCredentialsFileVariableAndRegionOrder) {
  Write("elsewhere/creds", "[default]\naws_access_key_id=K\naws_secret_access_key=S\n");
  env_["AWS_SHARED_CREDENTIALS_FILE"] = (tmp_.path() / "elsewhere/creds").string();
  env_["AWS_DEFAULT_REGION"] = "us-west-2";
  auto c = Resolve();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->credentials.access_key_id, "K");
  EXPECT_EQ(c->region, "us-west-2");
  env_["AWS_REGION"] = "eu-central-1";  // AWS_REGION comes first
  EXPECT_EQ(Resolve()->region, "eu-central-1");
}

TEST_F(S3ConfigTest, EndpointOrder) {
  env_["AWS_ACCESS_KEY_ID"] = "K";
  env_["AWS_SECRET_ACCESS_KEY"] = "S";
  env_["S3_ENDPOINT_URL"] = "http://mosaic:1";
  EXPECT_EQ(Resolve()->endpoint, "http://mosaic:1");
  env_["AWS_ENDPOINT_URL"] = "http://generic:2/";
  EXPECT_EQ(Resolve()->endpoint, "http://generic:2");
  env_["AWS_ENDPOINT_URL_S3"] = "https://s3only:3";
  EXPECT_EQ(Resolve()->endpoint, "https://s3only:3");
  env_["AWS_ENDPOINT_URL_S3"] = "ftp://x";
  auto bad = Resolve();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"ftp://x\": expected http(s)://host[:port]"));
}

TEST_F(S3ConfigTest, NoCredentialsNamesEveryPlace) {
  auto c = Resolve();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"));
  EXPECT_THAT(c.status().message(), HasSubstr(tmp_.path().string() + "/.aws/credentials"));
}

TEST_F(S3ConfigTest, MissingNamedProfile) {
  Write(".aws/credentials", "[default]\naws_access_key_id=K\naws_secret_access_key=S\n");
  env_["AWS_PROFILE"] = "nope";
  auto c = Resolve();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("AWS_PROFILE=nope: no such profile"));
}

TEST(S3UrlTest, Parse) {
  auto l = ParseS3Url("s3://my-bucket/a/b c.tsafe");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->bucket, "my-bucket");
  EXPECT_EQ(l->key, "a/b c.tsafe");
  EXPECT_EQ(l->Url(), "s3://my-bucket/a/b c.tsafe");
  EXPECT_EQ(ParseS3Url("s3://bkt")->key, "");
  EXPECT_TRUE(IsS3Url("S3://x/y"));
  EXPECT_FALSE(IsS3Url("http://x"));
  EXPECT_THAT(ParseS3Url("s3://ab/k").status().message(), HasSubstr("bucket name must be 3 to 63 bytes, not 2"));
  EXPECT_THAT(ParseS3Url("s3://Bad_Case/k").status().message(), HasSubstr("invalid character in bucket name"));
  EXPECT_THAT(ParseS3Url("s3://bkt/a\nb").status().message(), HasSubstr("control character in key"));
}

}  // namespace
}  // namespace tensorsafe::internal::s3

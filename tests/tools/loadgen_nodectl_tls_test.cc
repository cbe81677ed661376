// nodectl and loadgen over TLS (--tls-ca): nodectl against a fake AdminService that serves TLS
// with certificates this test makes (openssl CLI), and the credential helper's errors.
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/security/server_credentials.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/runtime/tls_test_certs.h"
#include "tests/temp_dirs.h"
#include "tests/tools/fake_admin_service.h"
#include "tools/channel_credentials.h"
#include "tools/loadgen_flags.h"
#include "tools/nodectl_commands.h"

namespace {

using ::testing::HasSubstr;

class ToolsTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = ::testing::TempDir() + "/tools_tls_" + std::to_string(::getpid());
    tests::RemoveAtExit(dir);
    certs_ = new runtime::testing::TestCerts(runtime::testing::MakeTestCerts(dir));
  }
  static void TearDownTestSuite() { delete certs_; }

  void SetUp() override {
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back({certs_->node_key_pem, certs_->node_cert_pem});
    ASSERT_TRUE(fake_.Start(grpc::SslServerCredentials(options)));
  }

  int Nodectl(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    args.insert(args.begin(), {"--admin", fake_.address(), "--timeout-ms", "5000"});
    args.push_back("status");
    return nodectl::RunNodectl(args, {.out = &out_, .err = &err_, .canceller = nullptr});
  }

  static inline runtime::testing::TestCerts* certs_ = nullptr;
  nodectl_test::FakeAdminService fake_;
  std::ostringstream out_, err_;
};

TEST_F(ToolsTlsTest, NodectlTrustingTheClusterCaTalksToATlsAdminPort) {
  EXPECT_EQ(Nodectl({"--tls-ca", certs_->ca_file}), nodectl::kExitOk) << err_.str();
  EXPECT_EQ(fake_.calls(), 1);
}

TEST_F(ToolsTlsTest, PlaintextOrTheWrongCaIsUnavailable) {
  EXPECT_EQ(Nodectl({}), nodectl::kExitRpcError);
  EXPECT_THAT(err_.str(), HasSubstr("UNAVAILABLE"));
  EXPECT_EQ(Nodectl({"--tls-ca", certs_->other_ca_file}), nodectl::kExitRpcError);
  EXPECT_THAT(err_.str(), HasSubstr("UNAVAILABLE"));
  EXPECT_EQ(fake_.calls(), 0);
}

TEST_F(ToolsTlsTest, BadCaFilesAreNamedUsageErrors) {
  EXPECT_EQ(Nodectl({"--tls-ca", certs_->dir + "/missing.crt"}), nodectl::kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--tls-ca: cannot read"));
  EXPECT_EQ(Nodectl({"--tls-ca", certs_->dir + "/ext.cnf"}), nodectl::kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("holds no PEM certificate"));
  EXPECT_TRUE(tools::ClientCredentials("--tls-ca", "").ok());  // plaintext
}

TEST(LoadgenTlsFlagTest, ParsesTlsCa) {
  bool help = false;
  absl::StatusOr<loadgen::Options> o = loadgen::ParseLoadgenFlags(
      {"--targets", "127.0.0.1:1", "--scenario", "hot:rate=1", "--tls-ca", "ca.crt"}, &help);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->tls_ca_file, "ca.crt");
  o = loadgen::ParseLoadgenFlags(
      {"--targets", "127.0.0.1:1", "--scenario", "hot:rate=1", "--tls-ca", ""}, &help);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("tls-ca"));
}

}  // namespace

#include "tools/channel_credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tools {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    absl::string_view flag, const std::string& ca_file) {
  if (ca_file.empty()) return grpc::InsecureChannelCredentials();
  std::ifstream in(ca_file);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", ca_file, "'"));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string pem = buf.str();
  if (!absl::StrContains(pem, "-----BEGIN CERTIFICATE-----")) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", ca_file, "' holds no PEM certificate"));
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pem;
  return grpc::SslCredentials(options);
}

}  // namespace tools

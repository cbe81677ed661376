// Test certificates made on the spot with the openssl CLI (Debian's openssl package): a CA, a
// node certificate it issued (P-256, SAN IP:127.0.0.1 and DNS:localhost, server and client
// auth, so one certificate serves every port and both sides of mutual TLS), and an unrelated
// second CA for "client trusts the wrong CA" cases. Nothing is checked in to the repository.
#ifndef TESTS_RUNTIME_TLS_TEST_CERTS_H_
#define TESTS_RUNTIME_TLS_TEST_CERTS_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace runtime::testing {

struct TestCerts {
  std::string dir;
  std::string ca_file, node_cert_file, node_key_file, other_ca_file;
  std::string ca_pem, node_cert_pem, node_key_pem, other_ca_pem;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes the files into `dir` (created). CHECK-fails if openssl fails: without certificates the
// tests cannot say anything.
inline TestCerts MakeTestCerts(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/ext.cnf") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                     "extendedKeyUsage=serverAuth,clientAuth\n"
                                     "basicConstraints=CA:FALSE\n";
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string script = absl::StrCat(
      "set -e; cd '", dir, "';", "openssl req -x509 ", ec,
      " -keyout ca.key -out ca.crt -days 2 -subj /CN=test-ca;", "openssl req -x509 ", ec,
      " -keyout other_ca.key -out other_ca.crt -days 2 -subj /CN=other;", "openssl req -new ", ec,
      " -keyout node.key -out node.csr -subj /CN=node;",
      "openssl x509 -req -in node.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out node.crt",
      " -days 2 -extfile ext.cnf");
  const std::string cmd = absl::StrCat("bash -c \"", script, "\" >'", dir, "/openssl.log' 2>&1");
  CHECK_EQ(std::system(cmd.c_str()), 0) << "openssl failed; see " << dir << "/openssl.log";
  TestCerts c;
  c.dir = dir;
  c.ca_file = dir + "/ca.crt";
  c.node_cert_file = dir + "/node.crt";
  c.node_key_file = dir + "/node.key";
  c.other_ca_file = dir + "/other_ca.crt";
  c.ca_pem = ReadAll(c.ca_file);
  c.node_cert_pem = ReadAll(c.node_cert_file);
  c.node_key_pem = ReadAll(c.node_key_file);
  c.other_ca_pem = ReadAll(c.other_ca_file);
  return c;
}

}  // namespace runtime::testing

#endif  // TESTS_RUNTIME_TLS_TEST_CERTS_H_

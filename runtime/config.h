// Node configuration: loading (protobuf text format or JSON), defaults and validation.
//
// Every refusal names the field by its path ("partitions[hot].pool.max_txs", see
// runtime/config_validation.h, whose validators this runs) and, for text format, the file and line
// where it was set, so an operator can fix a config without reading code. All problems are
// reported at once, one per line of the status message.
//
// Thread-compatible free functions; no state.
//
//   absl::StatusOr<node::config::NodeConfig> config = runtime::LoadConfigFile(path);
//   if (!config.ok()) { LOG(ERROR) << config.status(); return 2; }
#ifndef RUNTIME_CONFIG_H_
#define RUNTIME_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/config.pb.h"
#include "runtime/config_validation.h"

namespace runtime {

// Splits "host:port" (port in [0, 65535], 0 = pick a free port; "[::1]:port" for IPv6). False if
// it is not of that form.
bool ParseHostPort(absl::string_view address, std::string* host, int* port);

// The configuration `noded` runs with when given no --config: one node, partitions "hot" and
// "steady", data under ./data, every port on 127.0.0.1. Defaults already applied.
node::config::NodeConfig DefaultNodeConfig();

// Fills every unset field with its documented default (see proto/config.proto).
void ApplyDefaults(node::config::NodeConfig* config);

// Checks a config with defaults applied; returns every problem (empty when valid). Reads the
// PEM files named in config.tls when a TLS switch is on (runtime/tls.h), so a missing or
// mismatched file is a config error ("tls.cert_file: cannot read ...").
std::vector<ConfigProblem> ValidateNodeConfig(const node::config::NodeConfig& config);

// Parses `text` (JSON when `json`, else text format), applies defaults and validates.
// InvalidArgument listing "SOURCE:LINE: PATH: MESSAGE" lines (LINE omitted for JSON or for
// fields that were not written in the file).
absl::StatusOr<node::config::NodeConfig> ParseConfig(absl::string_view text,
                                                     absl::string_view source_name, bool json);

// Reads and parses a file; JSON when its name ends in ".json". NotFound if it cannot be read.
absl::StatusOr<node::config::NodeConfig> LoadConfigFile(const std::string& path);

// The line (1-based) at which `path` was set in text-format `text`, or 0 when it was not set
// there or cannot be parsed. A repeated message may be indexed by position or by its `name`
// field ("partitions[hot]"). Exposed for tests and for admin updates given as text.
int LineOfField(absl::string_view text, absl::string_view path);

}  // namespace runtime

#endif  // RUNTIME_CONFIG_H_

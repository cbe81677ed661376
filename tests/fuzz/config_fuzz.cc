// Fuzz target: node configuration loading (runtime/config.h).
//
// Input: byte 0 picks the form of the rest: protobuf text format or JSON (through ParseConfig,
// as noded reads a file), or a binary NodeConfig (any field values at all, reaching
// ApplyDefaults and ValidateNodeConfig with numbers no text mutation finds quickly).
// Checked: no crash; a config ParseConfig accepts validates with no problems, is a fixed point
// of ApplyDefaults, and prints back to text and JSON that parse to the same config; every
// problem names a field path and a message; LineOfField never crashes on any path.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "runtime/config.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "config_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

// Equal configs, or prints how they differ.
bool Same(const node::config::NodeConfig& a, const node::config::NodeConfig& b) {
  google::protobuf::util::MessageDifferencer differ;
  std::string report;
  differ.ReportDifferencesToString(&report);
  if (differ.Compare(a, b)) return true;
  std::fprintf(stderr, "config_fuzz: configs differ:\n%s\n", report.c_str());
  return false;
}

void CheckAccepted(const node::config::NodeConfig& config) {
  Require(runtime::ValidateNodeConfig(config).empty(), "accepted config validates");
  node::config::NodeConfig again = config;
  runtime::ApplyDefaults(&again);
  Require(Same(again, config), "ApplyDefaults is idempotent on an accepted config");

  std::string text;
  Require(google::protobuf::TextFormat::PrintToString(config, &text), "print text");
  absl::StatusOr<node::config::NodeConfig> from_text = runtime::ParseConfig(text, "rt", false);
  if (!from_text.ok()) std::fprintf(stderr, "%s\n", from_text.status().ToString().c_str());
  Require(from_text.ok() && Same(*from_text, config), "text round trip");

  std::string json;
  Require(google::protobuf::util::MessageToJsonString(config, &json).ok(), "print json");
  absl::StatusOr<node::config::NodeConfig> from_json = runtime::ParseConfig(json, "rt", true);
  if (!from_json.ok()) std::fprintf(stderr, "%s\n", from_json.status().ToString().c_str());
  Require(from_json.ok() && Same(*from_json, config), "json round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tests::QuietProtobufLogs();
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
    case 1: {
      const bool json = data[0] % 3 == 1;
      absl::StatusOr<node::config::NodeConfig> config = runtime::ParseConfig(rest, "fuzz", json);
      if (config.ok()) {
        CheckAccepted(*config);
      } else {
        Require(config.status().code() == absl::StatusCode::kInvalidArgument,
                "refusal is InvalidArgument");
        Require(!config.status().message().empty(), "refusal says why");
      }
      if (!json) {
        (void)runtime::LineOfField(rest, "partitions[0].consensus.checkpoint_interval");
        (void)runtime::LineOfField(rest, "peers[1].address");
        (void)runtime::LineOfField(rest, rest.substr(0, 64));
      }
      break;
    }
    case 2: {
      node::config::NodeConfig config;
      if (!config.ParseFromString(rest)) return 0;
      config.DiscardUnknownFields();  // text format cannot express them; noded reads no binary
      runtime::ApplyDefaults(&config);
      const auto problems = runtime::ValidateNodeConfig(config);
      for (const runtime::ConfigProblem& p : problems) {
        Require(!p.message.empty(), "problem has a message");
      }
      if (problems.empty()) CheckAccepted(config);
      break;
    }
  }
  return 0;
}

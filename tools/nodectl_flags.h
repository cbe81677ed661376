// Command-line flag parsing and number validation for nodectl.
//
// A deliberately small parser (no global flag registry, so every subcommand declares exactly the
// flags it accepts and tests can run many commands in one process). It understands
// `--name value`, `--name=value`, boolean `--name`, `-h`/`--help`, and `--` (end of flags).
// Flags keep their command-line order, which update-arbiter needs to group
// `--partition A --weight 2 --partition B --weight 1` into entries.
//
// Every parser returns absl::InvalidArgumentError with a message that names the flag, e.g.
// "--weight: must be > 0, got -1"; nodectl prints it with the usage and exits 2.
// All functions are pure and thread-safe.
//
//   const FlagSpec kSpecs[] = {{"partition", "P", "partition name"}, {"json", "", "print JSON"}};
//   ASSIGN_OR_RETURN(ParsedFlags f, ParseFlags(args, kSpecs));
//   if (const std::string* p = f.Last("partition")) ...
#ifndef TOOLS_NODECTL_FLAGS_H_
#define TOOLS_NODECTL_FLAGS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace nodectl {

struct FlagSpec {
  std::string name;        // without the leading "--"
  std::string value_name;  // "" for a boolean flag, else the placeholder shown in --help
  std::string help;
  bool repeatable = false;
};

struct ParsedFlags {
  // (name, value) in command-line order; value is "true" for boolean flags.
  std::vector<std::pair<std::string, std::string>> flags;
  std::vector<std::string> positional;
  bool help = false;

  bool Has(absl::string_view name) const;
  // The value of the last occurrence, or nullptr.
  const std::string* Last(absl::string_view name) const;
};

// Parses `args` (without the program and subcommand names) against `specs`. Unknown flags,
// missing values, values given to boolean flags and repeated non-repeatable flags are errors.
absl::StatusOr<ParsedFlags> ParseFlags(absl::Span<const std::string> args,
                                       absl::Span<const FlagSpec> specs);

// "  --name VALUE   help" lines, aligned.
std::string FormatFlagHelp(absl::Span<const FlagSpec> specs);

// Number parsers; `what` names the flag or key in errors ("--weight", "--pool max_txs").
absl::StatusOr<uint64_t> ParseUint(absl::string_view what, absl::string_view text, uint64_t min,
                                   uint64_t max);
// A finite double in [min, max]; min_exclusive makes the lower bound strict ("> 0").
absl::StatusOr<double> ParseDouble(absl::string_view what, absl::string_view text, double min,
                                   double max, bool min_exclusive = false);
// A byte count: an integer with an optional unit suffix: B, KB/MB/GB (10^3..), KiB/MiB/GiB
// (2^10..); also k/K, M, G as the binary units. Result in [min, max].
absl::StatusOr<uint64_t> ParseBytes(absl::string_view what, absl::string_view text, uint64_t min,
                                    uint64_t max);
// "a=1,b=2" into a map; keys must be in `allowed` and appear once.
absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(
    absl::string_view what, absl::string_view text, absl::Span<const absl::string_view> allowed);

}  // namespace nodectl

#endif  // TOOLS_NODECTL_FLAGS_H_

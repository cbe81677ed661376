#include "tools/nodectl_flags.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace nodectl {
namespace {

const FlagSpec* FindSpec(absl::Span<const FlagSpec> specs, absl::string_view name) {
  for (const FlagSpec& s : specs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

absl::Status Bad(absl::string_view what, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
}

}  // namespace

bool ParsedFlags::Has(absl::string_view name) const { return Last(name) != nullptr; }

const std::string* ParsedFlags::Last(absl::string_view name) const {
  for (auto it = flags.rbegin(); it != flags.rend(); ++it) {
    if (it->first == name) return &it->second;
  }
  return nullptr;
}

absl::StatusOr<ParsedFlags> ParseFlags(absl::Span<const std::string> args,
                                       absl::Span<const FlagSpec> specs) {
  ParsedFlags out;
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      out.positional.push_back(arg);  // includes "-" alone
      continue;
    }
    if (arg[1] != '-' && arg != "-h") {
      // Negative numbers stay positional; other short options do not exist here.
      if (absl::ascii_isdigit(static_cast<unsigned char>(arg[1])) || arg[1] == '.') {
        out.positional.push_back(arg);
        continue;
      }
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", arg, " (flags are long: --name)"));
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      out.help = true;
      continue;
    }
    absl::string_view body = absl::string_view(arg).substr(2);
    absl::string_view name = body;
    std::string value;
    bool has_inline_value = false;
    if (size_t eq = body.find('='); eq != absl::string_view::npos) {
      name = body.substr(0, eq);
      value = std::string(body.substr(eq + 1));
      has_inline_value = true;
    }
    const FlagSpec* spec = FindSpec(specs, name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (spec->value_name.empty()) {
      if (has_inline_value) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      }
      value = "true";
    } else if (!has_inline_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": missing value (", spec->value_name, ")"));
      }
      value = args[++i];
    }
    if (!spec->repeatable && out.Has(name)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": given more than once"));
    }
    out.flags.emplace_back(std::string(name), std::move(value));
  }
  return out;
}

std::string FormatFlagHelp(absl::Span<const FlagSpec> specs) {
  std::vector<std::string> left;
  size_t width = 0;
  for (const FlagSpec& s : specs) {
    std::string l = absl::StrCat("  --", s.name);
    if (!s.value_name.empty()) absl::StrAppend(&l, " ", s.value_name);
    width = std::max(width, l.size());
    left.push_back(std::move(l));
  }
  std::string out;
  for (size_t i = 0; i < specs.size(); ++i) {
    absl::StrAppend(&out, left[i], std::string(width - left[i].size() + 3, ' '), specs[i].help,
                    specs[i].repeatable ? " (repeatable)" : "", "\n");
  }
  return out;
}

absl::StatusOr<uint64_t> ParseUint(absl::string_view what, absl::string_view text, uint64_t min,
                                   uint64_t max) {
  uint64_t v = 0;
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t.empty() || t[0] == '-' || t[0] == '+' || !absl::SimpleAtoi(t, &v)) {
    if (int64_t neg = 0; absl::SimpleAtoi(t, &neg) && neg < 0) {
      return Bad(what, absl::StrCat("must be >= ", min, ", got ", t));
    }
    return Bad(what, absl::StrCat("not a non-negative integer: '", text, "'"));
  }
  if (v < min) return Bad(what, absl::StrCat("must be >= ", min, ", got ", v));
  if (v > max) return Bad(what, absl::StrCat("must be <= ", max, ", got ", v));
  return v;
}

absl::StatusOr<double> ParseDouble(absl::string_view what, absl::string_view text, double min,
                                   double max, bool min_exclusive) {
  double v = 0;
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t.empty() || !absl::SimpleAtod(t, &v) || std::isnan(v)) {
    return Bad(what, absl::StrCat("not a number: '", text, "'"));
  }
  if (!std::isfinite(v)) return Bad(what, absl::StrCat("must be finite, got ", t));
  if (min_exclusive ? !(v > min) : !(v >= min)) {
    return Bad(what, absl::StrCat("must be ", min_exclusive ? "> " : ">= ", min, ", got ", t));
  }
  if (v > max) return Bad(what, absl::StrCat("must be <= ", max, ", got ", t));
  return v;
}

absl::StatusOr<uint64_t> ParseBytes(absl::string_view what, absl::string_view text, uint64_t min,
                                    uint64_t max) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < t.size() && absl::ascii_isdigit(static_cast<unsigned char>(t[digits]))) {
    ++digits;
  }
  if (digits == 0) {
    if (!t.empty() && t[0] == '-') {
      return Bad(what, absl::StrCat("must be >= ", min, " bytes, got ", t));
    }
    return Bad(what, absl::StrCat("not a byte count: '", text, "' (e.g. 65536, 64KiB, 10MB)"));
  }
  struct Unit {
    absl::string_view suffix;
    uint64_t factor;
  };
  static constexpr Unit kUnits[] = {{"", 1},
                                    {"B", 1},
                                    {"KB", 1000},
                                    {"MB", 1000 * 1000},
                                    {"GB", 1000 * 1000 * 1000},
                                    {"KiB", 1 << 10},
                                    {"MiB", 1 << 20},
                                    {"GiB", 1 << 30},
                                    {"k", 1 << 10},
                                    {"K", 1 << 10},
                                    {"M", 1 << 20},
                                    {"G", 1 << 30}};
  absl::string_view suffix = absl::StripAsciiWhitespace(t.substr(digits));
  const Unit* unit = nullptr;
  for (const Unit& u : kUnits) {
    if (u.suffix == suffix) unit = &u;
  }
  if (unit == nullptr) {
    return Bad(what, absl::StrCat("unknown unit '", suffix, "' in '", text,
                                  "' (use B, KB, MB, GB, KiB, MiB, GiB)"));
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(t.substr(0, digits), &n) ||
      n > std::numeric_limits<uint64_t>::max() / unit->factor) {
    return Bad(what, absl::StrCat("too large: '", text, "'"));
  }
  uint64_t v = n * unit->factor;
  if (v < min) return Bad(what, absl::StrCat("must be >= ", min, " bytes, got ", v));
  if (v > max) return Bad(what, absl::StrCat("must be <= ", max, " bytes, got ", v));
  return v;
}

absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(
    absl::string_view what, absl::string_view text, absl::Span<const absl::string_view> allowed) {
  std::map<std::string, std::string> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    if (!absl::StrContains(item, '=') || key.empty()) {
      return Bad(what, absl::StrCat("expected key=value, got '", item, "'"));
    }
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return Bad(what, absl::StrCat("unknown key '", key,
                                    "' (known: ", absl::StrJoin(allowed, ", "), ")"));
    }
    if (!out.emplace(std::string(key), std::string(absl::StripAsciiWhitespace(kv.second))).second) {
      return Bad(what, absl::StrCat("key '", key, "' given more than once"));
    }
  }
  if (out.empty()) return Bad(what, "expected key=value[,key=value...]");
  return out;
}

}  // namespace nodectl

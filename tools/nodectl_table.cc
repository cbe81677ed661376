#include "tools/nodectl_table.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace nodectl {

Table::Table(std::vector<std::string> headers) {
  for (std::string& h : headers) {
    bool right = !h.empty() && h.back() == '>';
    if (right) h.pop_back();
    right_.push_back(right);
    headers_.push_back(std::move(h));
  }
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());  // a short row is padded rather than rejected
  rows_.push_back(std::move(cells));
}

void Table::Print(std::ostream& out, int indent) const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& cells) {
    std::string line(indent, ' ');
    for (size_t c = 0; c < cells.size(); ++c) {
      std::string pad(width[c] - cells[c].size(), ' ');
      if (c > 0) line += "  ";
      if (right_[c]) {
        absl::StrAppend(&line, pad, cells[c]);
      } else if (c + 1 < cells.size()) {
        absl::StrAppend(&line, cells[c], pad);
      } else {
        line += cells[c];  // no trailing blanks on the last column
      }
    }
    out << line << "\n";
  };
  print_row(headers_);
  for (const auto& row : rows_) print_row(row);
}

std::string FormatBytes(double bytes) {
  if (std::isinf(bytes)) return "inf";
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return absl::StrCat(FormatNumber(std::round(v)), " B");
  return absl::StrFormat("%.1f %s", v, kUnits[u]);
}

std::string FormatRate(double bytes_per_second, const std::string& zero_text) {
  if (bytes_per_second == 0) return zero_text;
  return absl::StrCat(FormatBytes(bytes_per_second), "/s");
}

std::string FormatMicros(double us) {
  if (us < 1000) return absl::StrFormat("%.0fus", us);
  if (us < 1e6) return absl::StrFormat("%.2fms", us / 1e3);
  return absl::StrFormat("%.2fs", us / 1e6);
}

std::string FormatDuration(uint64_t seconds) {
  uint64_t d = seconds / 86400, h = seconds / 3600 % 24, m = seconds / 60 % 60, s = seconds % 60;
  if (d > 0) return absl::StrFormat("%dd%02dh%02dm%02ds", d, h, m, s);
  if (h > 0) return absl::StrFormat("%dh%02dm%02ds", h, m, s);
  if (m > 0) return absl::StrFormat("%dm%02ds", m, s);
  return absl::StrFormat("%ds", s);
}

std::string FormatNumber(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  if (std::fabs(v) >= 1e15 || v == std::trunc(v)) return absl::StrFormat("%.0f", v);
  std::string s = absl::StrFormat("%.3f", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

std::string YesNo(bool b) { return b ? "yes" : "no"; }

}  // namespace nodectl

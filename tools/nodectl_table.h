// Aligned text tables and human-readable units for nodectl's default output.
//
// Not thread-safe (a Table is built and printed by one thread); the formatters are pure.
//
//   Table t({"LANE", "WEIGHT>", "DEPTH>"});  // a trailing '>' right-aligns the column
//   t.AddRow({"consensus", "8", "0"});
//   t.Print(out);
//   // LANE       WEIGHT  DEPTH
//   // consensus       8      0
#ifndef TOOLS_NODECTL_TABLE_H_
#define TOOLS_NODECTL_TABLE_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace nodectl {

class Table {
 public:
  // Header names; a name ending in '>' makes its column right-aligned (the '>' is not printed).
  explicit Table(std::vector<std::string> headers);

  // Missing trailing cells print empty; extra cells are dropped.
  void AddRow(std::vector<std::string> cells);
  // Columns separated by two spaces, no trailing blanks; `indent` spaces before each line.
  void Print(std::ostream& out, int indent = 0) const;
  size_t rows() const { return rows_.size(); }

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// 1536 -> "1.5 KiB"; below 1024 -> "512 B".
std::string FormatBytes(double bytes);
// FormatBytes + "/s"; 0 is printed as `zero_text` (e.g. "unlimited").
std::string FormatRate(double bytes_per_second, const std::string& zero_text = "0 B/s");
// Microseconds -> "850us", "1.25ms", "3.10s".
std::string FormatMicros(double us);
// Seconds -> "3d04h05m06s" style, leading zero units dropped.
std::string FormatDuration(uint64_t seconds);
// A double with up to 3 significant decimals and no trailing zeros ("8", "0.25", "1e+09" not
// used: large values print as integers). Infinity prints as "inf".
std::string FormatNumber(double v);
std::string YesNo(bool b);

}  // namespace nodectl

#endif  // TOOLS_NODECTL_TABLE_H_

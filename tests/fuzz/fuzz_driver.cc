// A standalone driver for the libFuzzer targets in tests/fuzz, for builds without libFuzzer (gcc).
//
// Runs every corpus file once, then seeded pseudo-random mutations of corpus entries (bit flips,
// byte sets, interesting values, inserts, erases, truncations, splices of two entries) until
// --runs mutated inputs ran or --seconds passed, whichever is first. Deterministic for a given
// seed and corpus, except for where the time limit cuts the run. A target that crashes on an
// input aborts the process; the input is first written to ./fuzz-driver-crash (signal handler)
// so it can be replayed: `fuzz_frame ./fuzz-driver-crash`.
//
//   fuzz_frame [--seconds S] [--runs N] [--seed K] CORPUS_DIR_OR_FILE...
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The input being run, for the crash handler (plain globals: read from a signal handler).
const char* g_current = nullptr;
size_t g_current_size = 0;

void OnFatalSignal(int sig) {
  int fd = open("fuzz-driver-crash", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0 && g_current != nullptr) {
    ssize_t ignored = write(fd, g_current, g_current_size);
    (void)ignored;
    close(fd);
  }
  const char msg[] = "fuzz_driver: crashing input written to ./fuzz-driver-crash\n";
  ssize_t ignored = write(2, msg, sizeof(msg) - 1);
  (void)ignored;
  signal(sig, SIG_DFL);
  raise(sig);
}

void Run(const std::string& input) {
  g_current = input.data();
  g_current_size = input.size();
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string Mutate(const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  auto below = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  std::string s = corpus.empty() ? std::string() : corpus[below(corpus.size())];
  const int steps = 1 + static_cast<int>(below(4));
  for (int i = 0; i < steps; ++i) {
    switch (below(8)) {
      case 0:  // bit flip
        if (!s.empty()) s[below(s.size())] ^= static_cast<char>(1u << below(8));
        break;
      case 1:  // random byte
        if (!s.empty()) s[below(s.size())] = static_cast<char>(rng());
        break;
      case 2: {  // interesting value
        static constexpr uint8_t kValues[] = {0, 1, 0x7f, 0x80, 0xff, 0x0a, 0x22, 0x08};
        if (!s.empty()) s[below(s.size())] = static_cast<char>(kValues[below(sizeof(kValues))]);
        break;
      }
      case 3: {  // insert a few random bytes
        std::string ins(1 + below(8), '\0');
        for (char& c : ins) c = static_cast<char>(rng());
        s.insert(below(s.size() + 1), ins);
        break;
      }
      case 4:  // erase a range
        if (!s.empty()) {
          size_t at = below(s.size());
          s.erase(at, 1 + below(std::min<size_t>(16, s.size() - at)));
        }
        break;
      case 5:  // truncate
        s.resize(below(s.size() + 1));
        break;
      case 6:  // splice: our head, another entry's tail
        if (!corpus.empty()) {
          const std::string& o = corpus[below(corpus.size())];
          s = s.substr(0, below(s.size() + 1)) + o.substr(below(o.size() + 1));
        }
        break;
      case 7:  // duplicate a range
        if (!s.empty()) {
          size_t at = below(s.size());
          size_t n = 1 + below(std::min<size_t>(32, s.size() - at));
          s.insert(below(s.size() + 1), s.substr(at, n));
        }
        break;
    }
  }
  if (s.size() > 8192) s.resize(8192);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 5;
  uint64_t runs = 20000;
  uint64_t seed = 1;
  std::vector<std::filesystem::path> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--seconds" || a == "--runs" || a == "--seed") && i + 1 < argc) {
      const char* v = argv[++i];
      if (a == "--seconds") seconds = std::atof(v);
      if (a == "--runs") runs = std::strtoull(v, nullptr, 10);
      if (a == "--seed") seed = std::strtoull(v, nullptr, 10);
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "usage: %s [--seconds S] [--runs N] [--seed K] CORPUS...\n", argv[0]);
      return 2;
    } else {
      paths.emplace_back(a);
    }
  }
  signal(SIGABRT, OnFatalSignal);
  signal(SIGSEGV, OnFatalSignal);
  signal(SIGFPE, OnFatalSignal);
  signal(SIGBUS, OnFatalSignal);
  signal(SIGILL, OnFatalSignal);

  std::vector<std::string> corpus;
  for (const auto& p : paths) {
    if (std::filesystem::is_directory(p)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());  // deterministic order
      for (const auto& f : files) corpus.push_back(ReadFile(f));
    } else if (std::filesystem::is_regular_file(p)) {
      corpus.push_back(ReadFile(p));
    } else {
      std::fprintf(stderr, "fuzz_driver: no such corpus: %s\n", p.c_str());
      return 2;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (const std::string& input : corpus) Run(input);
  Run(std::string());
  std::mt19937_64 rng(seed);
  uint64_t done = 0;
  while (done < runs && elapsed() < seconds) {
    Run(Mutate(corpus, rng));
    ++done;
  }
  std::printf("fuzz_driver: %zu corpus inputs + %llu mutations (seed %llu) in %.2f s, no crash\n",
              corpus.size(), static_cast<unsigned long long>(done),
              static_cast<unsigned long long>(seed), elapsed());
  return 0;
}

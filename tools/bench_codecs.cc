// bench-codecs: encode and decode throughput of every codec on one core, next to memcpy of the
// same bytes and, when PyTorch is installed, next to the PyTorch codecs the goals are stated
// against (tools/bench_codecs_torch.py). docs/bench_codecs.md has the method and the results.
//
// A cell is one (codec, d): float32 Gaussian input, encode timed through encodeStream (the call
// the engine makes; stateful codecs get their state from newState) and decode of the resulting
// frame timed separately, both including the frame CRC. GB/s is d * 4 bytes of float32 input
// over the median time of the repetitions.
//
//   bench-codecs [--sizes 1e4,1e5,1e6,1e7] [--codecs identity,fp16,...] [--reps 5]
//                [--min-time 0.25] [--max-time 3] [--format text|csv|json] [--cpu-clock]
//                [--no-torch] [--python PATH] [--torch-script PATH]
//
// Each codec runs in a forked child that streams its rows back through a pipe, so a codec whose
// factory is not implemented yet (std::abort) or that crashes is reported, not fatal.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compression/compressor.h"
#include "core/rng.h"

namespace {

using namespace starling;
using compression::CompressorSpec;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct Budget {
  int reps = 5;
  double minTime = 0.25;
  double maxTime = 3.0;
  // Thread CPU time instead of wall time: on a machine shared with other jobs a call's wall
  // time includes the time it waited for a core.
  bool cpuClock = false;
};

double now(bool cpuClock) {
  if (!cpuClock) return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Median seconds per call of f() after one warm-up call: at least `reps` samples and `minTime`
// seconds, stopping early once `maxTime` seconds have passed. Calls shorter than ~50 us are timed
// in batches, so that the clock's own cost stays below 1% of a sample.
template <typename F>
double medianSeconds(F&& f, const Budget& b) {
  const double w0 = now(b.cpuClock);
  f();
  const double once = std::max(1e-9, now(b.cpuClock) - w0);
  const int batch = once >= 50e-6 ? 1 : static_cast<int>(std::min(10000.0, 50e-6 / once) + 1);
  std::vector<double> t;
  const double start = now(b.cpuClock);
  for (;;) {
    const double t0 = now(b.cpuClock);
    for (int i = 0; i < batch; ++i) f();
    const double t1 = now(b.cpuClock);
    t.push_back((t1 - t0) / batch);
    const double elapsed = t1 - start;
    if ((static_cast<int>(t.size()) >= b.reps && elapsed >= b.minTime) || elapsed >= b.maxTime ||
        t.size() >= 1'000'000) {
      break;
    }
  }
  std::nth_element(t.begin(), t.begin() + static_cast<ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

// What the nothing-optimised-away checks accumulate into.
volatile uint64_t gSink = 0;

// One benchmarked parameter set; `torch` names the reference ops of bench_codecs_torch.py.
struct CodecCase {
  const char* name;
  const char* params;
  CompressorSpec (*spec)(size_t d);
  const char* torch = nullptr;
};

CompressorSpec kind(CompressorSpec::Kind k) {
  CompressorSpec s;
  s.kind = k;
  return s;
}

using K = CompressorSpec::Kind;
const std::vector<CodecCase>& allCases() {
  static const std::vector<CodecCase> cases = {
      {"identity", "", [](size_t) { return kind(K::kIdentity); }},
      {"fp16", "", [](size_t) { return kind(K::kFp16); }},
      {"bf16", "", [](size_t) { return kind(K::kBf16); }},
      {"sign", "scaled by mean abs", [](size_t) { return kind(K::kSign); }},
      {"qsgd4", "4 bits, l2, bucket 512",
       [](size_t) {
         auto s = kind(K::kQsgd);
         s.bits = 4;
         s.bucket = 512;
         return s;
       },
       "qsgd"},
      {"qsgd2inf", "2 bits, linf, bucket 512",
       [](size_t) {
         auto s = kind(K::kQsgd);
         s.bits = 2;
         s.linf = true;
         return s;
       }},
      {"nuqsgd4", "4 bits, bucket 512",
       [](size_t) {
         auto s = kind(K::kNuqsgd);
         s.bits = 4;
         return s;
       }},
      {"natural", "", [](size_t) { return kind(K::kNatural); }},
      {"natural_dithering", "4 levels, l2",
       [](size_t) {
         auto s = kind(K::kNaturalDithering);
         s.levels = 4;
         return s;
       }},
      {"topk", "ratio 0.01",
       [](size_t) {
         auto s = kind(K::kTopK);
         s.ratio = 0.01;
         return s;
       },
       "topk"},
      {"randk", "ratio 0.01, scaled",
       [](size_t) {
         auto s = kind(K::kRandK);
         s.ratio = 0.01;
         return s;
       }},
      {"topk_dithering", "ratio 0.01, 4 levels",
       [](size_t) {
         auto s = kind(K::kTopKDithering);
         s.ratio = 0.01;
         s.levels = 4;
         return s;
       }},
      {"countsketch", "5 x d/100, median, top d/1000",
       [](size_t d) {
         auto s = kind(K::kCountSketch);
         s.rows = 5;
         s.cols = std::max<size_t>(1, d / 100);
         s.k = std::max<size_t>(1, d / 1000);
         return s;
       },
       "cs"},
      {"countsketch_mean", "5 x d/100, mean",
       [](size_t d) {
         auto s = kind(K::kCountSketch);
         s.rows = 5;
         s.cols = std::max<size_t>(1, d / 100);
         s.meanEstimate = true;
         return s;
       }},
      {"adacomp", "bin 500",
       [](size_t) {
         auto s = kind(K::kAdaComp);
         s.bin = 500;
         return s;
       }},
      {"dqsgd", "bits 2..8, target 1, bucket 512", [](size_t) { return kind(K::kDqsgd); }},
  };
  return cases;
}

struct Row {
  std::string codec, params;
  size_t d = 0;
  double encodeS = 0, decodeS = 0, memcpyS = 0;
  size_t frameBytes = 0;
  std::string error;  // non-empty: the cell did not run
  std::optional<double> torchEncodeS, torchDecodeS;
};

double gbps(size_t d, double s) { return 4.0 * static_cast<double>(d) / s / 1e9; }

// Runs in the forked child: every size of one codec, one JSON line per cell on `fd`.
void runCodec(const CodecCase& c, const std::vector<size_t>& sizes, const Budget& b, int fd) {
  auto emit = [fd](const Json& j) {
    const std::string line = j.dump() + "\n";
    for (size_t off = 0; off < line.size();) {
      const ssize_t n = ::write(fd, line.data() + off, line.size() - off);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  };
  for (size_t d : sizes) {
    Json j = {{"d", d}};
    auto made = compression::createCompressor<float>(c.spec(d));
    if (!made) {
      j["error"] = made.status().toString();
      emit(j);
      continue;
    }
    const compression::Compressor<float>& codec = **made;
    std::vector<float> x(d), out(d);
    core::Rng data(7);
    for (float& v : x) v = static_cast<float>(data.normal());
    core::Rng rng(11);
    auto state = codec.newState(d);
    compression::StreamContext ctx{.round = 0, .sharedSeed = 42, .state = state.get()};
    std::vector<std::byte> frame;
    j["encode_s"] = medianSeconds(
        [&] {
          codec.encodeStream(x, rng, ctx, frame);
          ++ctx.round;
          gSink = gSink + frame.size() + std::to_integer<uint64_t>(frame[frame.size() / 2]);
        },
        b);
    j["frame_bytes"] = frame.size();
    core::Status failed;
    size_t probe = 0;
    j["decode_s"] = medianSeconds(
        [&] {
          core::Status st = codec.decode(frame, out);
          if (!st.isOk()) failed = st;
          probe = (probe * 31 + 17) % d;
          gSink = gSink + static_cast<uint64_t>(out[probe] != 0.0f);
        },
        b);
    if (!failed.isOk()) j["error"] = "decode: " + failed.toString();
    emit(j);
  }
}

// Forks one child per codec; rows it never sent are marked with how it ended.
std::vector<Row> runIsolated(const CodecCase& c, const std::vector<size_t>& sizes,
                             const Budget& b) {
  std::vector<Row> rows;
  for (size_t d : sizes) {
    Row r;
    r.codec = c.name;
    r.params = c.params;
    r.d = d;
    rows.push_back(std::move(r));
  }
  int fds[2];
  if (::pipe(fds) != 0) {
    for (auto& r : rows) r.error = std::string("pipe: ") + std::strerror(errno);
    return rows;
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    runCodec(c, sizes, b, fds[1]);
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  size_t got = 0;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    const Json j = Json::parse(text.substr(at, nl - at));
    Row& r = rows.at(got++);
    if (j.contains("error")) r.error = j["error"];
    if (j.contains("encode_s")) {
      r.encodeS = j["encode_s"];
      r.decodeS = j["decode_s"];
      r.frameBytes = j["frame_bytes"];
    }
  }
  std::string how;
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    how = got == 0 && sig == SIGABRT ? "not implemented (aborted)"
                                     : std::string("crashed: ") + strsignal(sig);
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    how = "child exited with " + std::to_string(WEXITSTATUS(status));
  }
  for (size_t i = got; i < rows.size(); ++i) rows[i].error = how.empty() ? "no result" : how;
  return rows;
}

double memcpySeconds(size_t d, const Budget& b) {
  std::vector<float> src(d), dst(d);
  for (size_t i = 0; i < d; ++i) src[i] = static_cast<float>(i & 1023);
  size_t probe = 0;
  return medianSeconds(
      [&] {
        std::memcpy(dst.data(), src.data(), d * sizeof(float));
        probe = (probe * 31 + 17) % d;
        gSink = gSink + static_cast<uint64_t>(dst[probe]);
      },
      b);
}

// The PyTorch reference: op name -> d -> seconds.
using TorchTimes = std::map<std::string, std::map<size_t, double>>;

// Empty, with `note` saying why, when torch or the script is unavailable.
TorchTimes runTorch(const std::string& python, const std::string& script, const std::string& sizes,
                    const Budget& b, std::string& note) {
  TorchTimes ops;
  std::vector<std::string> interpreters;
  if (!python.empty()) {
    interpreters = {python};
  } else {
    // Debian's python3-torch lives under /usr/bin/python3; a pyenv or venv python3 first on
    // PATH usually lacks it.
    interpreters = {"/usr/bin/python3", "python3"};
  }
  std::string path = script;
  if (!std::filesystem::exists(path)) {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    const auto guess =
        exe.parent_path().parent_path().parent_path() / "tools" / "bench_codecs_torch.py";
    if (!ec && std::filesystem::exists(guess)) path = guess.string();
  }
  if (!std::filesystem::exists(path)) {
    note = "torch: " + script + " not found";
    return ops;
  }
  for (const auto& py : interpreters) {
    const std::string cmd = py + " " + path + " --format json --sizes " + sizes + " --reps " +
                            std::to_string(b.reps) + " --min-time " + std::to_string(b.minTime) +
                            " --max-time " + std::to_string(b.maxTime) +
                            (b.cpuClock ? " --clock cpu" : "") + " 2>/dev/null";
    std::fflush(nullptr);
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) continue;
    std::string text;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
    if (::pclose(p) != 0 || text.empty()) continue;
    const Json j = Json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.contains("results")) continue;
    for (const auto& r : j["results"]) ops[r["op"]][r["d"].get<size_t>()] = r["seconds"];
    note = "torch " + j["torch"].get<std::string>() + " (" + py + "), " +
           std::to_string(j["threads"].get<int>()) + " thread";
    return ops;
  }
  note = "torch: not installed (apt-get install python3-torch)";
  return ops;
}

// Puts the reference op of each row's codec next to it: the sketch and unsketch of the count
// sketch, the encode and decode of the others.
void mergeTorch(const TorchTimes& ops, const std::vector<const CodecCase*>& chosen,
                std::vector<Row>& rows) {
  for (auto& r : rows) {
    for (const CodecCase* c : chosen) {
      if (r.codec != c->name || c->torch == nullptr) continue;
      const std::string base = c->torch;
      auto find = [&](const std::string& op) -> std::optional<double> {
        auto it = ops.find(op);
        if (it == ops.end() || !it->second.contains(r.d)) return std::nullopt;
        return it->second.at(r.d);
      };
      const bool sketch = base == "cs";
      r.torchEncodeS = find(sketch ? "cs_sketch" : base + "_encode");
      r.torchDecodeS = find(sketch ? "cs_unsketch" : base + "_decode");
    }
  }
}

std::vector<size_t> parseSizes(const std::vector<std::string>& text) {
  std::vector<size_t> sizes;
  for (const auto& t : text) {
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    if (end == t.c_str() || *end != '\0' || !(v >= 1) || v > 1e9) {
      throw CLI::ValidationError("--sizes", "bad size \"" + t + "\"");
    }
    sizes.push_back(static_cast<size_t>(std::llround(v)));
  }
  return sizes;
}

std::string sizeName(size_t d) {
  char buf[32];
  const double e = std::log10(static_cast<double>(d));
  if (std::abs(e - std::round(e)) < 1e-9) {
    std::snprintf(buf, sizeof buf, "1e%d", static_cast<int>(std::round(e)));
  } else {
    std::snprintf(buf, sizeof buf, "%zu", d);
  }
  return buf;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : "%.3g", v);
  return buf;
}

void printText(const std::vector<Row>& rows, const std::vector<size_t>& sizes, bool torch) {
  for (size_t d : sizes) {
    double memcpyS = 0;
    for (const auto& r : rows) {
      if (r.d == d) memcpyS = r.memcpyS;
    }
    std::printf("\n### d = %s (%s MB float32), memcpy %s GB/s\n\n", sizeName(d).c_str(),
                fmt(4.0 * static_cast<double>(d) / 1e6).c_str(), fmt(gbps(d, memcpyS)).c_str());
    std::printf(
        "| codec | parameters | encode GB/s | decode GB/s | encode %% of memcpy | "
        "decode %% of memcpy | ratio | bits/elem |%s\n",
        torch ? " torch enc GB/s | torch dec GB/s | enc vs torch | dec vs torch |" : "");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|%s\n", torch ? "---:|---:|---:|---:|" : "");
    for (const auto& r : rows) {
      if (r.d != d) continue;
      if (!r.error.empty()) {
        std::printf("| %s | %s | %s | | | | | |%s\n", r.codec.c_str(), r.params.c_str(),
                    r.error.c_str(), torch ? " | | | |" : "");
        continue;
      }
      const double bits = 8.0 * static_cast<double>(r.frameBytes) / static_cast<double>(d);
      std::printf("| %s | %s | %s | %s | %s%% | %s%% | %s | %s |", r.codec.c_str(),
                  r.params.c_str(), fmt(gbps(d, r.encodeS)).c_str(),
                  fmt(gbps(d, r.decodeS)).c_str(), fmt(100 * r.memcpyS / r.encodeS).c_str(),
                  fmt(100 * r.memcpyS / r.decodeS).c_str(), fmt(32.0 / bits).c_str(),
                  fmt(bits).c_str());
      if (torch) {
        auto cell = [](const std::optional<double>& s, size_t dd) {
          return s ? fmt(gbps(dd, *s)) : std::string();
        };
        auto speedup = [](const std::optional<double>& t, double ours) {
          return t ? fmt(*t / ours) + "x" : std::string();
        };
        std::printf(" %s | %s | %s | %s |", cell(r.torchEncodeS, d).c_str(),
                    cell(r.torchDecodeS, d).c_str(), speedup(r.torchEncodeS, r.encodeS).c_str(),
                    speedup(r.torchDecodeS, r.decodeS).c_str());
      }
      std::printf("\n");
    }
  }
}

Json rowJson(const Row& r) {
  Json j = {{"codec", r.codec},
            {"params", r.params},
            {"d", r.d},
            {"memcpy_s", r.memcpyS},
            {"memcpy_gbps", gbps(r.d, r.memcpyS)}};
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  const double bits = 8.0 * static_cast<double>(r.frameBytes) / static_cast<double>(r.d);
  j.update({{"encode_s", r.encodeS},
            {"decode_s", r.decodeS},
            {"encode_gbps", gbps(r.d, r.encodeS)},
            {"decode_gbps", gbps(r.d, r.decodeS)},
            {"encode_pct_memcpy", 100 * r.memcpyS / r.encodeS},
            {"decode_pct_memcpy", 100 * r.memcpyS / r.decodeS},
            {"frame_bytes", r.frameBytes},
            {"ratio", 32.0 / bits},
            {"bits_per_element", bits}});
  if (r.torchEncodeS) j["torch_encode_s"] = *r.torchEncodeS;
  if (r.torchDecodeS) j["torch_decode_s"] = *r.torchDecodeS;
  return j;
}

void printCsv(const std::vector<Row>& rows) {
  std::printf(
      "codec,params,d,encode_gbps,decode_gbps,memcpy_gbps,encode_pct_memcpy,"
      "decode_pct_memcpy,frame_bytes,ratio,bits_per_element,torch_encode_gbps,"
      "torch_decode_gbps,error\n");
  for (const auto& r : rows) {
    const Json j = rowJson(r);
    auto num = [&](const char* key) {
      return j.contains(key) ? fmt(j[key].get<double>()) : std::string();
    };
    auto torchCell = [&](const std::optional<double>& s) {
      return s ? fmt(gbps(r.d, *s)) : std::string();
    };
    std::printf("%s,\"%s\",%zu,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,\"%s\"\n", r.codec.c_str(),
                r.params.c_str(), r.d, num("encode_gbps").c_str(), num("decode_gbps").c_str(),
                num("memcpy_gbps").c_str(), num("encode_pct_memcpy").c_str(),
                num("decode_pct_memcpy").c_str(),
                r.error.empty() ? std::to_string(r.frameBytes).c_str() : "", num("ratio").c_str(),
                num("bits_per_element").c_str(), torchCell(r.torchEncodeS).c_str(),
                torchCell(r.torchDecodeS).c_str(), r.error.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-codecs: codec encode/decode throughput on one core vs memcpy and PyTorch"};
  std::vector<std::string> sizeText = {"1e4", "1e5", "1e6", "1e7"}, codecNames;
  for (const auto& c : allCases()) codecNames.push_back(c.name);
  Budget budget;
  std::string format = "text", python, script = "tools/bench_codecs_torch.py";
  bool noTorch = false;
  app.add_option("--sizes", sizeText, "vector lengths d (float32)")->delimiter(',');
  app.add_option("--codecs", codecNames, "codecs to run (default: all)")->delimiter(',');
  app.add_option("--reps", budget.reps, "at least this many timed calls per cell")
      ->check(CLI::PositiveNumber);
  app.add_option("--min-time", budget.minTime, "and at least this many seconds per cell")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-time", budget.maxTime, "but stop a cell after this many seconds")
      ->check(CLI::PositiveNumber);
  app.add_option("--format", format, "text, csv or json")
      ->check(CLI::IsMember({"text", "csv", "json"}));
  app.add_flag("--cpu-clock", budget.cpuClock,
               "time with the thread's CPU clock instead of wall time (for a shared machine)");
  app.add_flag("--no-torch", noTorch, "skip the PyTorch reference column");
  app.add_option("--python", python, "interpreter for the PyTorch reference");
  app.add_option("--torch-script", script, "path of bench_codecs_torch.py");
  CLI11_PARSE(app, argc, argv);
  std::vector<size_t> sizes;
  try {
    sizes = parseSizes(sizeText);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }
  std::vector<const CodecCase*> chosen;
  for (const auto& n : codecNames) {
    auto it = std::find_if(allCases().begin(), allCases().end(),
                           [&](const CodecCase& c) { return n == c.name; });
    if (it == allCases().end()) {
      std::fprintf(stderr, "unknown codec %s; known:", n.c_str());
      for (const auto& c : allCases()) std::fprintf(stderr, " %s", c.name);
      std::fprintf(stderr, "\n");
      return 2;
    }
    chosen.push_back(&*it);
  }

  std::map<size_t, double> memcpyS;
  for (size_t d : sizes) memcpyS[d] = memcpySeconds(d, budget);
  std::vector<Row> rows;
  for (const CodecCase* c : chosen) {
    std::fprintf(stderr, "bench-codecs: %s\n", c->name);
    for (auto& r : runIsolated(*c, sizes, budget)) {
      r.memcpyS = memcpyS[r.d];
      rows.push_back(std::move(r));
    }
  }
  std::string torchNote = "torch: skipped (--no-torch)";
  bool torch = false;
  const bool wantTorch = std::any_of(chosen.begin(), chosen.end(),
                                     [](const CodecCase* c) { return c->torch != nullptr; });
  if (!noTorch && !wantTorch) torchNote = "torch: no selected codec has a PyTorch reference";
  if (!noTorch && wantTorch) {
    std::string list;
    for (size_t d : sizes) list += (list.empty() ? "" : ",") + std::to_string(d);
    std::fprintf(stderr, "bench-codecs: PyTorch reference\n");
    const auto ops = runTorch(python, script, list, budget, torchNote);
    torch = !ops.empty();
    mergeTorch(ops, chosen, rows);
  }

  if (format == "json") {
    Json j = {{"torch", torchNote},
              {"clock", budget.cpuClock ? "thread_cpu" : "wall"},
              {"rows", Json::array()}};
    for (const auto& r : rows) j["rows"].push_back(rowJson(r));
    std::printf("%s\n", j.dump(1).c_str());
  } else if (format == "csv") {
    printCsv(rows);
  } else {
    std::printf(
        "bench-codecs: float32, one core, median of >= %d calls and >= %g s per cell "
        "(%s time); GB/s = d * 4 bytes of input / time\n%s\n",
        budget.reps, budget.minTime, budget.cpuClock ? "thread CPU" : "wall", torchNote.c_str());
    printText(rows, sizes, torch);
    std::printf("\n(checksum %llu)\n", static_cast<unsigned long long>(gSink));
  }
  return 0;
}

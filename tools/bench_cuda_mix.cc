// bench-cuda-mix: what one gossip round costs a training step when the model lives in GPU memory
// (Peer::mix(DeviceSpan), docs/cuda.md "Tensors on the GPU"), next to what a trainer without the
// GPU path does (copy the model to the host, Peer::mix there, copy it back), in the same run:
// 4 Peers on 4 threads of one process over the in-process transport (so the rows measure the
// round's own work, not a network), every Peer on GPU 0. Per codec and d, the median over the
// rounds of the slowest rank's mix() call, after warm-up rounds.
//
// usage: bench-cuda-mix [--json FILE] [--max-d N] [--rounds R] [--host]
//   --host: the device path on host memory (STARLING_DEVICE=host): a smoke run of this program
//   without a GPU; its times mean nothing.
#include <starling/peer.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cuda/driver.h"

using namespace starling;

namespace {

struct Codec {
  const char* name;
  const char* algorithm;
  const char* compression;  // "" for none
};

const Codec kCodecs[] = {
    {"none", R"({"kind": "dsgd", "step_size": 0.1})", ""},
    {"fp16", R"({"kind": "choco", "step_size": 0.1, "gamma": 0.5})", R"({"kind": "fp16"})"},
    {"topk 1%", R"({"kind": "choco", "step_size": 0.1, "gamma": 0.5})",
     R"({"kind": "topk", "ratio": 0.01})"},
    {"qsgd 4-bit", R"({"kind": "choco", "step_size": 0.1, "gamma": 0.5})",
     R"({"kind": "qsgd", "bits": 4, "bucket": 512})"},
    {"countsketch 5 x d/500, top-1%", R"({"kind": "choco", "step_size": 0.1, "gamma": 0.5})",
     nullptr},  // (its columns depend on d: written per d)
};

std::string scenario(const std::filesystem::path& dir, const Codec& c, uint64_t d) {
  std::string compression = c.compression != nullptr ? c.compression : "";
  if (c.compression == nullptr) {
    compression = R"({"kind": "countsketch", "rows": 5, "cols": )" +
                  std::to_string(std::max<uint64_t>(1, d / 500)) + R"(, "ratio": 0.01})";
  }
  const auto path = dir / ("mix-" + std::to_string(d) + "-" + std::to_string(std::rand()) + ".json");
  std::ofstream(path) << R"({"schema_version": 1, "name": "bench-cuda-mix", "nodes": 4, "seed": 1,
      "topology": {"kind": "ring"}, "transport": {"kind": "inproc"}, "algorithm": )"
                      << c.algorithm
                      << (compression.empty() ? "" : R"(, "compression": )" + compression) << "}";
  return path.string();
}

// The median over rounds of the slowest rank's mix(); `device`: Peer::mix(DeviceSpan) on GPU
// buffers (host buffers under --host), else the copy to the host, mix() there and the copy back.
double roundMs(const std::string& path, uint64_t d, int rounds, bool device, bool hostOnly,
               std::string& error) {
  constexpr int kWarm = 3;
  std::vector<std::vector<double>> ms(4, std::vector<double>(rounds + kWarm));
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] {
      auto fail = [&](const std::string& what) { errors[rank] = what; };
      auto peer = Peer::fromScenario(path, rank);
      if (!peer) return fail(peer.status().toString());
      std::vector<float> host(d);
      for (uint64_t k = 0; k < d; ++k) host[k] = std::sin(0.001f * k + rank);
      std::unique_ptr<cuda::Gpu> gpu;
      cuda::DeviceBuffer buffer;
      uint64_t address = reinterpret_cast<uint64_t>(host.data());
      if (!hostOnly) {
        auto g = cuda::Gpu::open(0);
        if (!g) return fail(g.status().toString());
        gpu = std::move(*g);
        cuda::Gpu::Scope scope(*gpu);
        auto b = cuda::DeviceBuffer::allocate(4 * d);
        if (!b) return fail(b.status().toString());
        buffer = std::move(*b);
        address = buffer.ptr();
        if (!gpu->copyToDevice(address, host.data(), 4 * d).isOk() || !gpu->sync().isOk()) {
          return fail("copy to the GPU");
        }
      }
      for (int r = 0; r < rounds + kWarm; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        Status s;
        if (device) {
          s = (*peer)->mix(DeviceSpan{address, d, 0});
        } else {
          if (gpu) s = gpu->copyToHost(host.data(), address, 4 * d).isOk() && gpu->sync().isOk()
                           ? Status() : Status(StatusCode::kInternal, "copy to the host");
          if (s.isOk()) s = (*peer)->mix(std::span<float>(host));
          if (s.isOk() && gpu) {
            s = gpu->copyToDevice(address, host.data(), 4 * d).isOk() && gpu->sync().isOk()
                    ? Status() : Status(StatusCode::kInternal, "copy to the GPU");
          }
        }
        if (!s.isOk()) return fail(s.toString());
        ms[rank][r] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                t0).count();
      }
      if (Status s = (*peer)->close(); !s.isOk()) fail(s.toString());
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) {
      error = e;
      return -1;
    }
  }
  std::vector<double> slowest;
  for (int r = kWarm; r < rounds + kWarm; ++r) {
    double worst = 0;
    for (int rank = 0; rank < 4; ++rank) worst = std::max(worst, ms[rank][r]);
    slowest.push_back(worst);
  }
  std::sort(slowest.begin(), slowest.end());
  return slowest[slowest.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const char* jsonPath = nullptr;
  uint64_t maxD = 100000000;
  int rounds = 10;
  bool hostOnly = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      jsonPath = argv[++i];
    } else if (a == "--max-d" && i + 1 < argc) {
      maxD = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--host") {
      hostOnly = true;
    } else {
      std::fprintf(stderr, "usage: bench-cuda-mix [--json FILE] [--max-d N] [--rounds R] [--host]\n");
      return 2;
    }
  }
  std::string where = "host memory (--host: STARLING_DEVICE=host)";
  if (hostOnly) {
    setenv("STARLING_DEVICE", "host", 1);
  } else {
    auto gpu = cuda::Gpu::open(0);
    if (!gpu) {
      std::printf("bench-cuda-mix: skipped, no GPU here: %s\n", gpu.status().message().c_str());
      return 77;
    }
    where = (*gpu)->name();
  }
  const auto dir = std::filesystem::temp_directory_path() /
                   ("bench-cuda-mix-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string json = "{\"device\": \"" + where + "\", \"rows\": [\n";
  std::printf("| codec | d | mix on the GPU: ms | copy to host, mix, copy back: ms |   (%s, 4 "
              "Peers, in-process transport)\n|---|---:|---:|---:|\n", where.c_str());
  bool first = true;
  for (uint64_t d = 1000000; d <= maxD; d *= 10) {
    for (const Codec& c : kCodecs) {
      const std::string path = scenario(dir, c, d);
      std::string error;
      const double gpuMs = roundMs(path, d, rounds, true, hostOnly, error);
      const double hostMs = gpuMs < 0 ? -1 : roundMs(path, d, rounds, false, hostOnly, error);
      if (gpuMs < 0 || hostMs < 0) {
        std::fprintf(stderr, "bench-cuda-mix: %s at d = %llu: %s\n", c.name,
                     static_cast<unsigned long long>(d), error.c_str());
        return 1;
      }
      std::printf("| %s | %.0e | %.2f | %.2f |\n", c.name, static_cast<double>(d), gpuMs, hostMs);
      std::fflush(stdout);
      json += std::string(first ? "" : ",\n") + "  {\"codec\": \"" + c.name +
              "\", \"d\": " + std::to_string(d) + ", \"gpu_ms\": " + std::to_string(gpuMs) +
              ", \"host_copy_ms\": " + std::to_string(hostMs) + "}";
      first = false;
    }
  }
  json += "\n]}\n";
  std::filesystem::remove_all(dir);
  if (jsonPath != nullptr) std::ofstream(jsonPath) << json;
  return 0;
}

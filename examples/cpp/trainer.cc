// A trainer that owns its model, data and gradient code and trains decentrally through
// starling::Peer: least squares, each rank with its own data.
//
//   make                                                       # builds ./trainer via pkg-config
//   node-launcher run scenario.json --out runs/cpp -- ./trainer --steps 400
//
// Rank r holds kSamples rows a_j of a kFeatures-column matrix and labels b_j, generated from r
// alone (so every rank can also generate everyone's data), and minimises
//   f_r(x) = 1/(2 kSamples) sum_j (a_j^T x - b_j)^2.
// The peers together minimise sum_r f_r; each rank solves that central problem too (normal
// equations) and logs how far its own model is from it, next to its loss.
// `./trainer --write-libsvm FILE` writes every rank's data in rank order as a LIBSVM file, so the
// same problem can run as a built-in least-squares scenario (node-launcher simulate).
#include <starling/peer.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

constexpr int kSamples = 40;   // per rank
constexpr int kFeatures = 8;

// splitmix64: a tiny deterministic generator, the same on every machine.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // A multiple of 1/1024 in [-1, 1): exact in float and double, and in a LIBSVM file.
  double value() { return static_cast<double>(static_cast<int>(next() % 2048) - 1024) / 1024.0; }
};

struct Data {
  std::vector<double> a;  // kSamples x kFeatures, row-major
  std::vector<double> b;
};

// Rank r's rows: labels from a rank-specific true model (the ranks' local optima differ) plus noise.
Data rankData(int rank) {
  Rng rng{0x5eed0000ULL + static_cast<uint64_t>(rank)};
  std::vector<double> truth(kFeatures);
  for (double& t : truth) t = rng.value();
  Data d;
  for (int j = 0; j < kSamples; ++j) {
    double dot = 0;
    for (int k = 0; k < kFeatures; ++k) {
      d.a.push_back(rng.value());
      dot += d.a.back() * truth[k];
    }
    // Rounded to 1/1024 so the label is exact too.
    d.b.push_back(std::round((dot + 0.1 * rng.value()) * 1024.0) / 1024.0);
  }
  return d;
}

// grad f_r(x) = (1/kSamples) A^T (A x - b); returns f_r(x).
double gradient(const Data& d, const std::vector<double>& x, std::vector<double>& g) {
  std::fill(g.begin(), g.end(), 0.0);
  double loss = 0;
  for (int j = 0; j < kSamples; ++j) {
    double r = -d.b[j];
    for (int k = 0; k < kFeatures; ++k) r += d.a[j * kFeatures + k] * x[k];
    loss += 0.5 * r * r / kSamples;
    for (int k = 0; k < kFeatures; ++k) g[k] += d.a[j * kFeatures + k] * r / kSamples;
  }
  return loss;
}

// argmin sum_r f_r: (sum_r A_r^T A_r) x = sum_r A_r^T b_r, by Gaussian elimination.
std::vector<double> centralSolution(int nodes) {
  std::vector<double> m(kFeatures * kFeatures, 0.0), v(kFeatures, 0.0);
  for (int r = 0; r < nodes; ++r) {
    const Data d = rankData(r);
    for (int j = 0; j < kSamples; ++j) {
      for (int p = 0; p < kFeatures; ++p) {
        v[p] += d.a[j * kFeatures + p] * d.b[j];
        for (int q = 0; q < kFeatures; ++q) {
          m[p * kFeatures + q] += d.a[j * kFeatures + p] * d.a[j * kFeatures + q];
        }
      }
    }
  }
  for (int c = 0; c < kFeatures; ++c) {
    int pivot = c;
    for (int r = c + 1; r < kFeatures; ++r) {
      if (std::abs(m[r * kFeatures + c]) > std::abs(m[pivot * kFeatures + c])) pivot = r;
    }
    for (int k = 0; k < kFeatures; ++k) std::swap(m[c * kFeatures + k], m[pivot * kFeatures + k]);
    std::swap(v[c], v[pivot]);
    for (int r = 0; r < kFeatures; ++r) {
      if (r == c) continue;
      const double f = m[r * kFeatures + c] / m[c * kFeatures + c];
      for (int k = 0; k < kFeatures; ++k) m[r * kFeatures + k] -= f * m[c * kFeatures + k];
      v[r] -= f * v[c];
    }
  }
  for (int c = 0; c < kFeatures; ++c) v[c] /= m[c * kFeatures + c];
  return v;
}

int writeLibsvm(const char* path, int nodes) {
  std::ofstream out(path);
  for (int r = 0; r < nodes; ++r) {
    const Data d = rankData(r);
    for (int j = 0; j < kSamples; ++j) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", d.b[j]);
      out << buf;
      for (int k = 0; k < kFeatures; ++k) {
        std::snprintf(buf, sizeof buf, " %d:%.17g", k + 1, d.a[j * kFeatures + k]);
        out << buf;
      }
      out << "\n";
    }
  }
  return out ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 400;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (arg == "--write-libsvm" && i + 2 < argc) {
      return writeLibsvm(argv[i + 1], std::atoi(argv[i + 2]));
    } else {
      std::fprintf(stderr, "usage: trainer [--steps N] | --write-libsvm FILE NODES\n");
      return 2;
    }
  }

  // Rank, scenario, output folder and peer addresses from `node-launcher run ... -- trainer`.
  auto made = starling::Peer::fromEnv();
  if (!made) {
    std::fprintf(stderr, "trainer: %s\n", made.status().toString().c_str());
    return 1;
  }
  starling::Peer& peer = **made;
  const Data data = rankData(peer.rank());
  const std::vector<double> best = centralSolution(peer.nodes());
  double bestNorm = 0;
  for (double v : best) bestNorm += v * v;

  std::vector<double> x(kFeatures, 0.0), g(kFeatures);
  for (int t = 0; t < steps; ++t) {
    const double loss = gradient(data, x, g);  // the trainer's own backward pass, at x
    if (auto st = peer.step(std::span<double>(x), std::span<const double>(g)); !st.isOk()) {
      std::fprintf(stderr, "trainer %d: %s\n", peer.rank(), st.toString().c_str());
      return 1;
    }
    double err = 0;
    for (int k = 0; k < kFeatures; ++k) err += (x[k] - best[k]) * (x[k] - best[k]);
    (void)peer.log({{"loss", loss}, {"dist_to_central", std::sqrt(err / bestNorm)}});
  }
  if (auto st = peer.close(); !st.isOk()) {
    std::fprintf(stderr, "trainer %d: %s\n", peer.rank(), st.toString().c_str());
    return 1;
  }
  // The final model, exactly, for whoever checks it.
  if (const char* out = std::getenv("STARLING_OUT")) {
    std::ofstream f(std::string(out) + "/model-rank-" + std::to_string(peer.rank()) + ".txt");
    for (double v : x) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g\n", v);
      f << buf;
    }
  }
  double err = 0;
  for (int k = 0; k < kFeatures; ++k) err += (x[k] - best[k]) * (x[k] - best[k]);
  std::printf("trainer %d: %d steps, ||x - x*|| / ||x*|| = %.3e\n", peer.rank(), steps,
              std::sqrt(err / bestNorm));
  return 0;
}

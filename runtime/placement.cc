#include "runtime/placement.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "core/read_file.h"

namespace starling::runtime {
namespace {

// One bound for everything that multiplies out of a short text (host names in a list, nodes in a
// tasks-per-node list, tasks in a step, slots in a hostfile): Slurm's own hostlist refuses ranges
// past this size, and a run this large is far beyond what Starling is built for. Without it
// "n[0-99999999999]" or "1(x4000000000)" would be an allocation, not an error.
constexpr uint64_t kMaxNames = uint64_t{1} << 20;

// Hostfiles are a line per host; a megabyte is tens of thousands of hosts.
constexpr uint64_t kMaxHostfileBytes = uint64_t{1} << 20;

// Texts come from the environment or a file, so they can be long: a message quotes enough of one
// to find it, not all of it.
std::string quote(std::string_view text) {
  constexpr size_t kMaxQuoted = 200;
  if (text.size() <= kMaxQuoted) return "\"" + std::string(text) + "\"";
  return "\"" + std::string(text.substr(0, kMaxQuoted)) + "...\"";
}

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && isSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && isSpace(s.back())) s.remove_suffix(1);
  return s;
}

bool allDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A decimal number made of digits only (no sign, no spaces), at most `max`; nullopt otherwise.
std::optional<uint64_t> parseNumber(std::string_view s, uint64_t max) {
  if (!allDigits(s)) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v > max) return std::nullopt;
  return v;
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// The alternatives of one bracket group ("1-3,7" gives 1 2 3 7), zero-padded to the width of each
// range's low bound as Slurm prints them ("08-10" gives 08 09 10; "8-10" gives 8 9 10).
core::Result<std::vector<std::string>> expandRanges(std::string_view ranges,
                                                    std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = ranges.find(',', start);
    const std::string_view item = ranges.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const size_t dash = item.find('-');
    const std::string_view loText = item.substr(0, dash);
    const std::string_view hiText = dash == std::string_view::npos ? loText : item.substr(dash + 1);
    // 18 digits keep every bound, and hi - lo + 1, inside uint64_t.
    const auto lo = parseNumber(loText, 999'999'999'999'999'999ULL);
    const auto hi = parseNumber(hiText, 999'999'999'999'999'999ULL);
    if (!lo || !hi) {
      return core::invalidArgument("host list " + quote(list) + ": " + quote(item) +
                                   " is not a number or a range lo-hi");
    }
    if (*hi < *lo) {
      return core::invalidArgument("host list " + quote(list) + ": the range " + quote(item) +
                                   " ends below its start");
    }
    if (*hi - *lo + 1 > kMaxNames || out.size() + (*hi - *lo + 1) > kMaxNames) {
      return core::invalidArgument("host list " + quote(list) + ": the range " + quote(item) +
                                   " has more than " + std::to_string(kMaxNames) + " names");
    }
    for (uint64_t v = *lo;; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < loText.size()) digits.insert(0, loText.size() - digits.size(), '0');
      out.push_back(std::move(digits));
      if (v == *hi) break;
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// One top-level entry of a host list: literal text and bracket groups, multiplied out leftmost
// slowest. Appends to `out`, which holds the names of the entries before it.
core::Status expandEntry(std::string_view entry, std::string_view list,
                         std::vector<std::string>& out) {
  std::vector<std::string> names = {""};
  size_t i = 0;
  while (i < entry.size()) {
    if (entry[i] != '[') {
      const size_t open = std::min(entry.find('[', i), entry.size());
      const std::string_view literal = entry.substr(i, open - i);
      for (auto& n : names) n += literal;
      i = open;
      continue;
    }
    // The caller checked that brackets pair up and do not nest.
    const size_t close = entry.find(']', i);
    auto alternatives = expandRanges(entry.substr(i + 1, close - i - 1), list);
    if (!alternatives) return alternatives.status();
    // Both factors are at most kMaxNames, so the product fits in 64 bits.
    const uint64_t total = static_cast<uint64_t>(names.size()) * alternatives->size();
    if (out.size() + total > kMaxNames) {
      return core::invalidArgument("host list " + quote(list) + " has more than " +
                                   std::to_string(kMaxNames) + " names");
    }
    std::vector<std::string> next;
    next.reserve(total);
    for (const auto& prefix : names) {
      for (const auto& alt : *alternatives) next.push_back(prefix + alt);
    }
    names = std::move(next);
    i = close + 1;
  }
  if (out.size() + names.size() > kMaxNames) {
    return core::invalidArgument("host list " + quote(list) + " has more than " +
                                 std::to_string(kMaxNames) + " names");
  }
  for (auto& n : names) out.push_back(std::move(n));
  return core::Status::ok();
}

// Where `task` stands among the tasks of its own node, counted in task order: what Slurm exports
// as SLURM_LOCALID.
int localIndexOf(const std::vector<int>& nodeOfTask, int task) {
  int index = 0;
  for (int t = 0; t < task; ++t) index += nodeOfTask[t] == nodeOfTask[task] ? 1 : 0;
  return index;
}

core::Status checkPorts(int basePort, int ranks) {
  if (basePort < 1 || basePort > 65535 || static_cast<int64_t>(basePort) + ranks - 1 > 65535) {
    return core::invalidArgument("ports " + std::to_string(basePort) + " to " +
                                 std::to_string(static_cast<int64_t>(basePort) + ranks - 1) +
                                 " (base port + rank, for " + std::to_string(ranks) +
                                 " ranks) are not all between 1 and 65535");
  }
  return core::Status::ok();
}

}  // namespace

core::Result<std::vector<std::string>> expandHostlist(std::string_view list) {
  // Split at the commas outside brackets first (those inside belong to a range list), checking
  // that brackets pair up: an unclosed "[" would otherwise swallow the rest of the list.
  std::vector<std::string_view> entries;
  bool inBracket = false;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') {
      if (inBracket) {
        return core::invalidArgument("host list " + quote(list) + ": brackets inside brackets");
      }
      inBracket = true;
    } else if (c == ']') {
      if (!inBracket) {
        return core::invalidArgument("host list " + quote(list) + ": \"]\" without \"[\"");
      }
      inBracket = false;
    } else if (c == ',' && !inBracket) {
      entries.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (inBracket) {
    return core::invalidArgument("host list " + quote(list) + ": \"[\" without \"]\"");
  }
  std::vector<std::string> out;
  for (std::string_view raw : entries) {
    // Whitespace around an entry ("n1, n2", a trailing newline) is trimmed, as a shell-quoted
    // list is easy to write that way; inside a name it is refused, as no host name has any.
    const std::string_view entry = trim(raw);
    if (entry.empty()) {
      return core::invalidArgument("host list " + quote(list) + " has an empty name");
    }
    if (std::any_of(entry.begin(), entry.end(), isSpace)) {
      return core::invalidArgument("host list " + quote(list) + ": " + quote(entry) +
                                   " has a space inside a name; separate names with commas");
    }
    STARLING_RETURN_IF_ERROR(expandEntry(entry, list, out));
  }
  return out;
}

core::Result<std::vector<int>> expandTasksPerNode(std::string_view text) {
  const auto bad = [&](std::string_view item, const std::string& why) {
    return core::invalidArgument("tasks per node " + quote(text) + ": " + quote(item) + " " + why);
  };
  std::vector<int> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    // "N" or "N(xM)": N tasks on each of M nodes.
    std::string_view countText = item;
    std::string_view repeatText = "1";
    if (const size_t paren = item.find('('); paren != std::string_view::npos) {
      countText = item.substr(0, paren);
      const std::string_view rest = item.substr(paren);
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')') {
        return bad(item, "is not a count N or N(xM)");
      }
      repeatText = rest.substr(2, rest.size() - 3);
    }
    const auto count = parseNumber(countText, kMaxNames);
    const auto repeat = parseNumber(repeatText, kMaxNames);
    if (!count || !repeat) return bad(item, "is not a count N or N(xM)");
    if (*count == 0 || *repeat == 0) return bad(item, "has a zero count; counts must be positive");
    if (out.size() + *repeat > kMaxNames) {
      return bad(item, "makes more than " + std::to_string(kMaxNames) + " nodes");
    }
    out.insert(out.end(), *repeat, static_cast<int>(*count));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

core::Result<SlurmDistribution> parseSlurmDistribution(std::string_view text,
                                                       std::string_view planeSizeText,
                                                       int* planeSize) {
  // srun's form is node[:socket[:core]][,Pack|NoPack]; only the node level decides where a task
  // runs, so the socket and core levels and the packing flag are not checked at all.
  std::string_view node = text.substr(0, text.find(','));
  node = trim(node.substr(0, node.find(':')));
  const std::string name = lowercase(node.substr(0, node.find('=')));
  // "*" is srun's "the default", which is block; so is an unset variable.
  if (name.empty() || name == "*" || name == "block") {
    if (node.find('=') != std::string_view::npos) {
      return core::invalidArgument("SLURM_DISTRIBUTION=" + quote(text) +
                                   ": only plane takes a size (plane=N)");
    }
    return SlurmDistribution::kBlock;
  }
  if (name == "cyclic") {
    if (node.find('=') != std::string_view::npos) {
      return core::invalidArgument("SLURM_DISTRIBUTION=" + quote(text) +
                                   ": only plane takes a size (plane=N)");
    }
    return SlurmDistribution::kCyclic;
  }
  if (name == "plane") {
    std::string_view sizeText;
    std::string from;
    if (const size_t eq = node.find('='); eq != std::string_view::npos) {
      sizeText = node.substr(eq + 1);
      from = "SLURM_DISTRIBUTION=" + quote(text);
    } else {
      sizeText = trim(planeSizeText);
      from = "SLURM_DIST_PLANESIZE=" + quote(planeSizeText);
      if (sizeText.empty()) {
        return core::invalidArgument("SLURM_DISTRIBUTION=" + quote(text) +
                                     " is plane, but SLURM_DIST_PLANESIZE is not set and no "
                                     "size is given (plane=N)");
      }
    }
    const auto size = parseNumber(sizeText, kMaxNames);
    if (!size || *size == 0) {
      return core::invalidArgument(from + ": the plane size must be a positive integer");
    }
    if (planeSize != nullptr) *planeSize = static_cast<int>(*size);
    return SlurmDistribution::kPlane;
  }
  if (name == "arbitrary") {
    return core::invalidArgument(
        "SLURM_DISTRIBUTION=" + quote(text) +
        ": the arbitrary distribution places tasks by SLURM_HOSTFILE, which is not supported; use "
        "block, cyclic or plane, or give the peers' addresses explicitly");
  }
  return core::invalidArgument("SLURM_DISTRIBUTION=" + quote(text) +
                               ": unknown distribution; expected block, cyclic or plane");
}

core::Result<std::vector<int>> slurmNodeOfTask(const std::vector<int>& tasksPerNode,
                                               SlurmDistribution distribution, int planeSize) {
  if (tasksPerNode.empty()) return core::invalidArgument("a Slurm step with no nodes");
  uint64_t total = 0;
  for (size_t i = 0; i < tasksPerNode.size(); ++i) {
    if (tasksPerNode[i] <= 0) {
      return core::invalidArgument("node " + std::to_string(i) + " of the Slurm step has " +
                                   std::to_string(tasksPerNode[i]) +
                                   " tasks; counts must be positive");
    }
    total += static_cast<uint64_t>(tasksPerNode[i]);
    if (total > kMaxNames) {
      return core::invalidArgument("a Slurm step of more than " + std::to_string(kMaxNames) +
                                   " tasks");
    }
  }
  if (distribution == SlurmDistribution::kPlane && planeSize <= 0) {
    return core::invalidArgument("plane size " + std::to_string(planeSize) +
                                 "; it must be positive");
  }
  std::vector<int> nodeOf;
  nodeOf.reserve(total);
  if (distribution == SlurmDistribution::kBlock) {
    for (size_t n = 0; n < tasksPerNode.size(); ++n) {
      nodeOf.insert(nodeOf.end(), tasksPerNode[n], static_cast<int>(n));
    }
    return nodeOf;
  }
  // Cyclic is plane with blocks of one. Rounds over the nodes that still have room: each visit
  // gives a node the next min(block, room) tasks. When a plane block does not fit (P = 2 and a
  // node with room for 1), the node takes what it has room for and the rest of the block
  // continues with the next node, whose turn then runs to a full block of P again (it is not cut
  // short to the remainder). That is how Slurm numbers plane tasks: in round k every node with
  // room takes its tasks k*P .. k*P+P-1, in node order. A full node leaves the rotation, so the
  // work is linear in the number of tasks, not nodes times tasks.
  const int block = distribution == SlurmDistribution::kCyclic ? 1 : planeSize;
  std::vector<int> room = tasksPerNode;
  std::vector<int> active(tasksPerNode.size());
  for (size_t n = 0; n < active.size(); ++n) active[n] = static_cast<int>(n);
  while (!active.empty()) {
    std::vector<int> still;
    for (int n : active) {
      const int take = std::min(block, room[n]);
      nodeOf.insert(nodeOf.end(), take, n);
      room[n] -= take;
      if (room[n] > 0) still.push_back(n);
    }
    active = std::move(still);
  }
  return nodeOf;
}

core::Result<std::vector<HostfileEntry>> parseHostfile(std::string_view text,
                                                       const std::string& file) {
  std::vector<HostfileEntry> hosts;
  size_t lineNo = 0;
  size_t start = 0;
  while (start < text.size()) {
    ++lineNo;
    const size_t eol = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, eol - start);
    start = eol + 1;
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const std::string where = file + ":" + std::to_string(lineNo);

    std::vector<std::string_view> words;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && isSpace(line[i])) ++i;
      const size_t b = i;
      while (i < line.size() && !isSpace(line[i])) ++i;
      if (i > b) words.push_back(line.substr(b, i - b));
    }
    HostfileEntry entry{std::string(words[0]), 1};
    if (entry.host.find('=') != std::string::npos) {
      return core::invalidArgument(where + ": the line starts with " + quote(words[0]) +
                                   ", not a host name");
    }
    bool haveSlots = false;
    for (size_t w = 1; w < words.size(); ++w) {
      const size_t eq = words[w].find('=');
      const std::string_view key = words[w].substr(0, eq);
      const std::string_view value =
          eq == std::string_view::npos ? std::string_view() : words[w].substr(eq + 1);
      if (key != "slots" && key != "max_slots") {
        return core::invalidArgument(where + ": unknown key " + quote(key) +
                                     "; expected slots=N or max_slots=N");
      }
      const auto n = parseNumber(value, kMaxNames);
      if (eq == std::string_view::npos || !n || *n == 0) {
        return core::invalidArgument(where + ": " + quote(words[w]) + ": " + std::string(key) +
                                     " must be a positive integer");
      }
      if (key == "slots") {
        if (haveSlots) return core::invalidArgument(where + ": slots given twice");
        haveSlots = true;
        entry.slots = static_cast<int>(*n);
      }
      // max_slots only matters to OpenMPI when oversubscribing, which mapBySlot never does.
    }
    auto same = std::find_if(hosts.begin(), hosts.end(),
                             [&](const HostfileEntry& h) { return h.host == entry.host; });
    if (same == hosts.end()) {
      hosts.push_back(std::move(entry));
    } else if (static_cast<uint64_t>(same->slots) + entry.slots > kMaxNames) {
      return core::invalidArgument(where + ": host " + quote(entry.host) + " has more than " +
                                   std::to_string(kMaxNames) + " slots in all");
    } else {
      same->slots += entry.slots;
    }
  }
  return hosts;
}

core::Result<std::vector<int>> mapBySlot(const std::vector<HostfileEntry>& hosts, int ranks,
                                         const std::string& file) {
  if (ranks <= 0) {
    return core::invalidArgument(file + ": cannot map " + std::to_string(ranks) + " ranks");
  }
  uint64_t slots = 0;
  for (const auto& h : hosts) slots += static_cast<uint64_t>(std::max(h.slots, 0));
  if (slots < static_cast<uint64_t>(ranks)) {
    return core::invalidArgument(file + " has " + std::to_string(slots) + " slots for " +
                                 std::to_string(ranks) +
                                 " ranks; add hosts or slots (ranks are not oversubscribed)");
  }
  std::vector<int> hostOf;
  hostOf.reserve(static_cast<size_t>(ranks));
  for (size_t h = 0; h < hosts.size() && hostOf.size() < static_cast<size_t>(ranks); ++h) {
    const size_t take =
        std::min(static_cast<size_t>(std::max(hosts[h].slots, 0)), ranks - hostOf.size());
    hostOf.insert(hostOf.end(), take, static_cast<int>(h));
  }
  return hostOf;
}

EnvLookup processEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::optional<core::Result<std::vector<std::string>>> fromSlurm(const EnvLookup& env, int nodes,
                                                                int basePort) {
  // The first of `names` that is set, with its name for messages.
  struct Var {
    std::string name;
    std::optional<std::string> value;
  };
  const auto first = [&](std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (auto v = env(n)) return Var{n, std::move(v)};
    }
    return Var{*names.begin(), std::nullopt};
  };
  const Var procVar = first({"SLURM_PROCID"});
  const Var listVar = first({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"});
  // Not started by srun: the caller looks elsewhere.
  if (!procVar.value || !listVar.value) return std::nullopt;

  using R = core::Result<std::vector<std::string>>;
  const auto shown = [](const Var& v) { return v.name + "=" + quote(*v.value); };

  if (nodes <= 0) return R(core::invalidArgument("a run of " + std::to_string(nodes) + " nodes"));
  if (auto st = checkPorts(basePort, nodes); !st.isOk()) return R(st);

  const auto proc = parseNumber(*procVar.value, kMaxNames);
  if (!proc) return R(core::invalidArgument(shown(procVar) + " is not a task number"));

  auto hosts = expandHostlist(*listVar.value);
  if (!hosts) return R(hosts.status().withContext(listVar.name));

  const Var tpnVar = first({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (!tpnVar.value) {
    return R(core::invalidArgument("neither SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE "
                                   "is set, so the tasks of the Slurm step (" +
                                   shown(listVar) + ") cannot be placed on its nodes"));
  }
  auto perNode = expandTasksPerNode(*tpnVar.value);
  if (!perNode) return R(perNode.status().withContext(tpnVar.name));

  uint64_t sum = 0;
  for (int c : *perNode) sum += static_cast<uint64_t>(c);
  // The step's size is the first thing to agree on: a mismatch here is a wrong srun -n, which
  // the message should say before any detail of the layout.
  const Var countVar = first({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  if (countVar.value) {
    const auto count = parseNumber(*countVar.value, kMaxNames);
    if (!count) return R(core::invalidArgument(shown(countVar) + " is not a task count"));
    if (*count != static_cast<uint64_t>(nodes)) {
      return R(core::invalidArgument(
          "the Slurm step has " + std::to_string(*count) + " tasks (" + shown(countVar) +
          ") but the run has " + std::to_string(nodes) +
          " nodes; start one task per node (srun -n " + std::to_string(nodes) + ")"));
    }
  }
  if (perNode->size() != hosts->size()) {
    return R(core::invalidArgument(shown(tpnVar) + " gives " + std::to_string(perNode->size()) +
                                   " nodes but " + shown(listVar) + " names " +
                                   std::to_string(hosts->size())));
  }
  if (sum != static_cast<uint64_t>(nodes)) {
    return R(core::invalidArgument(
        shown(tpnVar) + " adds up to " + std::to_string(sum) + " tasks but " +
        (countVar.value ? shown(countVar) : "the run has " + std::to_string(nodes) + " nodes")));
  }

  const Var distVar = first({"SLURM_DISTRIBUTION"});
  const Var planeVar = first({"SLURM_DIST_PLANESIZE"});
  int planeSize = 0;
  auto distribution =
      parseSlurmDistribution(distVar.value.value_or(""), planeVar.value.value_or(""), &planeSize);
  if (!distribution) return R(distribution.status());
  auto nodeOf = slurmNodeOfTask(*perNode, *distribution, planeSize);
  if (!nodeOf) return R(nodeOf.status());

  if (*proc >= static_cast<uint64_t>(nodes)) {
    return R(core::invalidArgument(shown(procVar) + " is outside the step's " +
                                   std::to_string(nodes) + " tasks"));
  }
  const int task = static_cast<int>(*proc);
  const int node = (*nodeOf)[task];
  const std::string layout = shown(listVar) + ", " + shown(tpnVar) + " and " +
                             (distVar.value ? shown(distVar) : "SLURM_DISTRIBUTION unset (block)");
  if (const Var nodeVar = first({"SLURM_NODEID"}); nodeVar.value) {
    const auto id = parseNumber(*nodeVar.value, kMaxNames);
    if (!id) return R(core::invalidArgument(shown(nodeVar) + " is not a node number"));
    if (*id != static_cast<uint64_t>(node)) {
      return R(core::invalidArgument(
          layout + " put task " + std::to_string(task) + " (SLURM_PROCID) on node " +
          std::to_string(node) + " (" + (*hosts)[node] + "), but " + shown(nodeVar) +
          "; the layout cannot be trusted, give the peers' addresses explicitly"));
    }
  }
  if (const Var localVar = first({"SLURM_LOCALID"}); localVar.value) {
    const auto id = parseNumber(*localVar.value, kMaxNames);
    if (!id) return R(core::invalidArgument(shown(localVar) + " is not a local task number"));
    const int local = localIndexOf(*nodeOf, task);
    if (*id != static_cast<uint64_t>(local)) {
      return R(core::invalidArgument(
          layout + " make task " + std::to_string(task) + " (SLURM_PROCID) task " +
          std::to_string(local) + " of node " + std::to_string(node) + " (" + (*hosts)[node] +
          "), but " + shown(localVar) +
          "; the layout cannot be trusted, give the peers' addresses explicitly"));
    }
  }

  std::vector<std::string> addresses;
  addresses.reserve(static_cast<size_t>(nodes));
  for (int r = 0; r < nodes; ++r) {
    addresses.push_back((*hosts)[(*nodeOf)[r]] + ":" + std::to_string(basePort + r));
  }
  return R(std::move(addresses));
}

core::Result<std::vector<std::string>> fromHostfile(const std::string& path, int nodes,
                                                    int basePort) {
  STARLING_RETURN_IF_ERROR(checkPorts(basePort, nodes));
  auto text = core::readRegularFile(path, kMaxHostfileBytes, "hostfile");
  if (!text) return text.status();
  auto hosts = parseHostfile(*text, path);
  if (!hosts) return hosts.status();
  auto hostOf = mapBySlot(*hosts, nodes, path);
  if (!hostOf) return hostOf.status();
  std::vector<std::string> addresses;
  addresses.reserve(hostOf->size());
  for (int r = 0; r < nodes; ++r) {
    addresses.push_back((*hosts)[(*hostOf)[r]].host + ":" + std::to_string(basePort + r));
  }
  return addresses;
}

}  // namespace starling::runtime

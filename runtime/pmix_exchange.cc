#include "runtime/pmix_exchange.h"

#include <cstdlib>

#ifdef STARLING_HAVE_PMIX
#include <pmix.h>
#endif

namespace starling::runtime {


bool pmixAvailable() {
#ifdef STARLING_HAVE_PMIX
  return true;
#else
  return false;
#endif
}

bool underPmix(const EnvLookup& env) {
  const auto set = [&](const char* name) {
    const auto v = env(name);
    return v && !v->empty();
  };
  // mpirun (OpenMPI 4) and srun --mpi=pmix both set the namespace and a server URI.
  return pmixAvailable() && set("PMIX_NAMESPACE") &&
         (set("PMIX_SERVER_URI4") || set("PMIX_SERVER_URI3") || set("PMIX_SERVER_URI2") ||
          set("PMIX_SERVER_URI21") || set("PMIX_SERVER_URI41"));
}

#ifdef STARLING_HAVE_PMIX

namespace {
constexpr const char* kAddressKey = "starling.address";

core::Status fromPmix(pmix_status_t rc, const std::string& what) {
  if (rc == PMIX_SUCCESS) return core::Status::ok();
  return core::unavailable("PMIx " + what + ": " + PMIx_Error_string(rc));
}

// A uint32 the server holds for the whole job (PMIX_RANK_WILDCARD).
core::Result<uint32_t> jobValue(const std::string& nspace, const char* key) {
  pmix_proc_t wild;
  PMIX_LOAD_PROCID(&wild, nspace.c_str(), PMIX_RANK_WILDCARD);
  pmix_value_t* v = nullptr;
  const pmix_status_t rc = PMIx_Get(&wild, key, nullptr, 0, &v);
  if (rc != PMIX_SUCCESS) return fromPmix(rc, std::string("get ") + key);
  uint32_t out = 0;
  if (v->type == PMIX_UINT32) out = v->data.uint32;
  else if (v->type == PMIX_UINT64) out = static_cast<uint32_t>(v->data.uint64);
  else if (v->type == PMIX_INT) out = static_cast<uint32_t>(v->data.integer);
  else if (v->type == PMIX_UINT16) out = v->data.uint16;
  PMIX_VALUE_RELEASE(v);
  return out;
}
}  // namespace

core::Result<std::unique_ptr<PmixSession>> PmixSession::connect() {
  pmix_proc_t me;
  STARLING_RETURN_IF_ERROR(fromPmix(PMIx_Init(&me, nullptr, 0), "init (is the launcher alive?)"));
  std::unique_ptr<PmixSession> s(new PmixSession);
  s->nspace_ = me.nspace;
  s->job_.rank = static_cast<int>(me.rank);
  auto size = jobValue(s->nspace_, PMIX_JOB_SIZE);
  if (!size) return size.status();
  s->job_.size = static_cast<int>(*size);
  auto local = jobValue(s->nspace_, PMIX_LOCAL_SIZE);
  s->job_.localSize = local ? static_cast<int>(*local) : 0;  // 0: unknown
  return s;
}

PmixSession::~PmixSession() { PMIx_Finalize(nullptr, 0); }

core::Result<std::vector<std::string>> PmixSession::exchange(const std::string& own,
                                                             std::chrono::seconds deadline) {
  pmix_value_t value;
  PMIX_VALUE_CONSTRUCT(&value);
  value.type = PMIX_STRING;
  value.data.string = const_cast<char*>(own.c_str());  // PMIx_Put copies it
  STARLING_RETURN_IF_ERROR(fromPmix(PMIx_Put(PMIX_GLOBAL, kAddressKey, &value), "put"));
  STARLING_RETURN_IF_ERROR(fromPmix(PMIx_Commit(), "commit"));
  pmix_proc_t wild;
  PMIX_LOAD_PROCID(&wild, nspace_.c_str(), PMIX_RANK_WILDCARD);
  pmix_info_t info[2];
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  bool collect = true;
  int seconds = static_cast<int>(deadline.count());
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
  const pmix_status_t rc = PMIx_Fence(&wild, 1, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (rc != PMIX_SUCCESS) {
    return fromPmix(rc, "fence (waiting " + std::to_string(seconds) +
                            " s for every rank to publish its address)");
  }
  std::vector<std::string> out;
  for (int r = 0; r < job_.size; ++r) {
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, nspace_.c_str(), static_cast<pmix_rank_t>(r));
    pmix_value_t* v = nullptr;
    const pmix_status_t g = PMIx_Get(&p, kAddressKey, nullptr, 0, &v);
    if (g != PMIX_SUCCESS) return fromPmix(g, "get rank " + std::to_string(r) + "'s address");
    if (v->type != PMIX_STRING || v->data.string == nullptr) {
      PMIX_VALUE_RELEASE(v);
      return core::unavailable("PMIx: rank " + std::to_string(r) + "'s address is not a string");
    }
    out.emplace_back(v->data.string);
    PMIX_VALUE_RELEASE(v);
  }
  return out;
}

#else  // no PMIx in this build

core::Result<std::unique_ptr<PmixSession>> PmixSession::connect() {
  return core::unavailable("this build has no PMIx (install libpmix-dev and rebuild)");
}
PmixSession::~PmixSession() = default;
core::Result<std::vector<std::string>> PmixSession::exchange(const std::string&,
                                                             std::chrono::seconds) {
  return core::unavailable("this build has no PMIx");
}

#endif

}  // namespace starling::runtime

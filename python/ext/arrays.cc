#include "python/ext/arrays.h"

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <utility>

namespace py = pybind11;

namespace starling::python {
namespace {

constexpr const char* kExpected =
    "a 1-D contiguous float32 or float64 array: a numpy array or a PyTorch CPU tensor";

std::string typeName(PyObject* obj) {
  py::handle type(reinterpret_cast<PyObject*>(Py_TYPE(obj)));
  std::string module = py::str(type.attr("__module__"));
  std::string name = py::str(type.attr("__qualname__"));
  return module == "builtins" ? name : module + "." + name;
}

std::string shapeString(int ndim, const auto* shape) {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(static_cast<long long>(shape[i]));
  }
  return s + (ndim == 1 ? ",)" : ")");
}

// The buffer protocol's struct format ("f", "<d", "=q", ...) as a numpy-style name.
std::string formatName(const char* format, Py_ssize_t itemsize) {
  std::string f = format == nullptr ? "B" : format;
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<' || f[0] == '>' || f[0] == '!')) {
    f.erase(0, 1);
  }
  if (f == "f") return "float32";
  if (f == "d") return "float64";
  if (f == "e") return "float16";
  if (f == "?") return "bool";
  if (f == "Zf") return "complex64";
  if (f == "Zd") return "complex128";
  if (f.size() == 1 && std::string("bhilqn").find(f[0]) != std::string::npos) {
    return "int" + std::to_string(8 * itemsize);
  }
  if (f.size() == 1 && std::string("BHILQN").find(f[0]) != std::string::npos) {
    return "uint" + std::to_string(8 * itemsize);
  }
  return "buffer format '" + std::string(format == nullptr ? "B" : format) + "'";
}

std::string dlpackDtypeName(DLDataType t) {
  std::string base;
  switch (t.code) {
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLFloat: base = "float"; break;
    case kDLBfloat: base = "bfloat"; break;
    case kDLComplex: base = "complex"; break;
    default: base = "dlpack type code " + std::to_string(t.code) + " bits "; break;
  }
  if (t.code == kDLUInt && t.bits == 1) return "bool";
  std::string s = base + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

std::string deviceName(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(d.device_id);
    case kDLCUDAHost: return "cuda pinned host memory";
    case kDLROCM: return "rocm:" + std::to_string(d.device_id);
    case kDLMetal: return "metal:" + std::to_string(d.device_id);
    case kDLVulkan: return "vulkan:" + std::to_string(d.device_id);
    default: return "device type " + std::to_string(d.device_type);
  }
}

[[noreturn]] void typeError(const char* name, const std::string& got) {
  throw py::type_error(std::string(name) + " must be " + kExpected + "; got " + got);
}

[[noreturn]] void valueError(const char* name, const std::string& what) {
  throw py::value_error(std::string(name) + " must be " + kExpected + "; " + what);
}

// Throws unless a 1-D array of `n` elements with element stride `stride` is contiguous.
void checkContiguous(const char* name, long long n, long long stride, const std::string& got) {
  if (n > 1 && stride != 1) {
    valueError(name, "got " + got + " with a stride of " + std::to_string(stride) +
                         " elements (not contiguous). Starling updates the caller's memory in "
                         "place, so it cannot work on a copy: pass a contiguous array");
  }
}

}  // namespace

const char* dtypeName(DType dtype) { return dtype == DType::kFloat32 ? "float32" : "float64"; }

Borrowed::Borrowed(Borrowed&& other) noexcept { *this = std::move(other); }

Borrowed& Borrowed::operator=(Borrowed&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    dtype_ = other.dtype_;
    device_ = std::exchange(other.device_, -1);
    view_ = other.view_;
    hasView_ = std::exchange(other.hasView_, false);
    other.view_ = Py_buffer{};
    dl_ = std::exchange(other.dl_, nullptr);
  }
  return *this;
}

Borrowed::~Borrowed() { reset(); }

void Borrowed::reset() {
  if (hasView_) {
    PyBuffer_Release(&view_);
    hasView_ = false;
  }
  if (dl_ != nullptr) {
    if (dl_->deleter != nullptr) dl_->deleter(dl_);
    dl_ = nullptr;
  }
  data_ = nullptr;
  size_ = 0;
  device_ = -1;
}

Borrowed Borrowed::from(PyObject* obj, const char* name, Access access) {
  Borrowed b;
  if (PyObject_CheckBuffer(obj)) {
    // Ask for strides and format (never for a copy): a non-contiguous or read-only buffer is
    // then reported by us, with what was expected, rather than as a bare BufferError.
    if (PyObject_GetBuffer(obj, &b.view_, PyBUF_RECORDS_RO) != 0) throw py::error_already_set();
    b.hasView_ = true;
    const Py_buffer& v = b.view_;
    std::string got = "a " + typeName(obj);
    std::string dtype = formatName(v.format, v.itemsize);
    if (dtype == "float32" && v.itemsize == 4) {
      b.dtype_ = DType::kFloat32;
    } else if (dtype == "float64" && v.itemsize == 8) {
      b.dtype_ = DType::kFloat64;
    } else {
      typeError(name, got + " of dtype " + dtype);
    }
    if (v.ndim != 1) {
      valueError(name, "got " + got + " of shape " + shapeString(v.ndim, v.shape) +
                           " (flatten it first: a contiguous array's reshape(-1) is a view)");
    }
    long long n = v.shape[0];
    long long stride = v.strides == nullptr ? 1 : v.strides[0] / v.itemsize;
    if (v.strides != nullptr && v.strides[0] % v.itemsize != 0) stride = -1;
    checkContiguous(name, n, stride, got);
    if (access == Access::kWrite && v.readonly) {
      valueError(name, "got a read-only " + typeName(obj) +
                           "; Starling writes the result into it in place");
    }
    b.data_ = v.buf;
    b.size_ = static_cast<std::size_t>(n);
    return b;
  }

  py::handle h(obj);
  if (!py::hasattr(h, "__dlpack__")) typeError(name, "a " + typeName(obj));
  return fromDlpack(obj, name, std::nullopt);
}

int Borrowed::cudaDevice(PyObject* obj) {
  py::handle h(obj);
  if (PyObject_CheckBuffer(obj) || !py::hasattr(h, "__dlpack__") ||
      !py::hasattr(h, "__dlpack_device__")) {
    return -1;
  }
  py::tuple device = h.attr("__dlpack_device__")();
  if (device.size() != 2) return -1;
  const long type = py::int_(device[0]);
  const long id = py::int_(device[1]);
  return type == kDLCUDA ? static_cast<int>(id) : -1;
}

Borrowed Borrowed::fromCuda(PyObject* obj, const char* name, uint64_t stream) {
  return fromDlpack(obj, name, stream);
}

Borrowed Borrowed::fromDlpack(PyObject* obj, const char* name, std::optional<uint64_t> stream) {
  Borrowed b;
  py::handle h(obj);
  // torch 1.13 refuses to export a tensor that requires grad; say what to do instead.
  if (py::hasattr(h, "requires_grad") && py::bool_(h.attr("requires_grad"))) {
    throw py::value_error(std::string(name) + " is a " + typeName(obj) +
                          " that requires grad; pass " + name +
                          ".detach() (it shares the tensor's memory, so the update still "
                          "happens in place)");
  }
  // A CUDA producer orders its work before `stream` (DLPack's protocol: an event on its current
  // stream that `stream` waits for), so Starling reads the values after they are written.
  py::object capsule = stream ? h.attr("__dlpack__")(py::arg("stream") = *stream)
                              : h.attr("__dlpack__")();
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    typeError(name, "a " + typeName(obj) + " whose __dlpack__() did not return a DLPack capsule");
  }
  auto* managed =
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  // Consumed: from here on the deleter is ours to call (the DLPack capsule protocol).
  if (PyCapsule_SetName(capsule.ptr(), "used_dltensor") != 0) throw py::error_already_set();
  b.dl_ = managed;
  const DLTensor& t = managed->dl_tensor;
  std::string got = "a " + typeName(obj);
  if (stream && t.device.device_type == kDLCUDA) {
    if (!(t.dtype.code == kDLFloat && t.dtype.bits == 32 && t.dtype.lanes == 1)) {
      throw py::type_error(std::string(name) + " on " + deviceName(t.device) +
                           " must be float32 (the GPU codecs' type); got " + got +
                           " of dtype " + dlpackDtypeName(t.dtype));
    }
    b.device_ = t.device.device_id;
  } else if (t.device.device_type != kDLCPU) {
    typeError(name, got + " on " + deviceName(t.device) +
                        " (this call reads CPU memory: move it with .cpu(); Peer.mix and "
                        "Peer.mix_start take CUDA tensors, docs/cuda.md)");
  }
  if (t.dtype.code == kDLFloat && t.dtype.bits == 32 && t.dtype.lanes == 1) {
    b.dtype_ = DType::kFloat32;
  } else if (t.dtype.code == kDLFloat && t.dtype.bits == 64 && t.dtype.lanes == 1) {
    b.dtype_ = DType::kFloat64;
  } else {
    typeError(name, got + " of dtype " + dlpackDtypeName(t.dtype));
  }
  if (t.ndim != 1) {
    valueError(name, "got " + got + " of shape " + shapeString(t.ndim, t.shape) +
                         " (flatten it first: a contiguous tensor's view(-1) is a view)");
  }
  long long n = t.shape[0];
  checkContiguous(name, n, t.strides == nullptr ? 1 : t.strides[0], got);
  b.data_ = static_cast<char*>(t.data) + t.byte_offset;
  b.size_ = static_cast<std::size_t>(n);
  return b;
}

}  // namespace starling::python

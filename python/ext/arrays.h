// Borrowing a Python array's memory without copying it: the buffer protocol (numpy, array.array,
// memoryview) or DLPack (`__dlpack__`: PyTorch CPU tensors, and anything else that exports it).
//
// The binding never links libtorch (a binding tied to one torch build is what made BlueFog and
// Bagua hard to install): a torch tensor crosses as a DLPack capsule, read with <dlpack/dlpack.h>.
//
// Thread-safety: a Borrowed is created and destroyed with the GIL held; between the two its
// data() may be read and written from any thread with the GIL released (the exporter's memory
// stays alive and in place for as long as the Borrowed lives).
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

struct DLManagedTensor;

namespace starling::python {

enum class DType { kFloat32, kFloat64 };

const char* dtypeName(DType dtype);

// What the caller needs the memory for.
enum class Access { kRead, kWrite };

// One borrowed 1-D contiguous float32/float64 array. Move-only; releases the exporter's
// buffer (PyBuffer_Release or the DLPack deleter) when destroyed.
class Borrowed {
 public:
  Borrowed() = default;
  Borrowed(Borrowed&& other) noexcept;
  Borrowed& operator=(Borrowed&& other) noexcept;
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;
  ~Borrowed();

  // Borrows `obj`'s memory, or throws (pybind11's type_error / value_error) with a message
  // naming `name` ("params", "grads"), what it got and what is expected.
  static Borrowed from(PyObject* obj, const char* name, Access access);
  // The CUDA device ordinal `obj` says it lives on (its __dlpack_device__() is kDLCUDA), or -1.
  static int cudaDevice(PyObject* obj);
  // A CUDA tensor's memory, from `obj.__dlpack__(stream=stream)`: the producer orders its work
  // on the values before the CUstream `stream` (DLPack's protocol). 1-D contiguous float32.
  static Borrowed fromCuda(PyObject* obj, const char* name, uint64_t stream);

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  DType dtype() const { return dtype_; }
  // The CUDA device ordinal of memory borrowed by fromCuda, else -1 (host memory).
  int device() const { return device_; }
  bool empty() const { return data_ == nullptr && size_ == 0 && !hasView_ && dl_ == nullptr; }

  void reset();

 private:
  static Borrowed fromDlpack(PyObject* obj, const char* name, std::optional<uint64_t> stream);

  void* data_ = nullptr;
  int device_ = -1;
  std::size_t size_ = 0;
  DType dtype_ = DType::kFloat32;
  Py_buffer view_{};
  bool hasView_ = false;
  DLManagedTensor* dl_ = nullptr;
};

}  // namespace starling::python

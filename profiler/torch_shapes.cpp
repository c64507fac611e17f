#include "profiler/torch_shapes.h"

#include <unistd.h>

#include <fstream>
#include <stdexcept>

namespace shardscope::profiler {

namespace {

// Kept in step with torch/autograd/profiler.py's emit_nvtx (PyTorch 2.x):
// __enter__ calls torch.cuda.synchronize() and then enables the NVTX
// profiler state with record_shapes.
constexpr const char* kSitecustomize =
    R"PY(# Written by `shardscope profile --torch-shapes` (profiler/torch_shapes.cpp):
# PyTorch's NVTX op ranges with input shapes in this process, entered before
# the program runs, after the sitecustomize this file hides (if any).
import os
import sys


def _shardscope_fail(message):
    text = "shardscope profile --torch-shapes (pid %d): %s" % (os.getpid(), message)
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
    directory = os.environ.get("SHARDSCOPE_PROFILE_DIR")
    if directory:
        try:
            with open(os.path.join(directory, "%d.error" % os.getpid()), "w") as f:
                f.write(text + "\n")
        except OSError:
            pass
    os._exit(2)


def _shardscope_chain():
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path = list(sys.path)
    ours = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        import importlib.util

        spec = importlib.util.find_spec("sitecustomize")
        if spec is not None and spec.loader is not None:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
    finally:
        sys.path[:] = saved_path
        if ours is not None:
            sys.modules["sitecustomize"] = ours


def _shardscope_emit_nvtx():
    try:
        import torch
        import torch.autograd.profiler
    except Exception as e:
        _shardscope_fail(
            "cannot import torch (%s: %s): the flag records PyTorch's NVTX op ranges and needs "
            "a Python program using PyTorch, run by a Python that has it" % (type(e).__name__, e))
    context = torch.autograd.profiler.emit_nvtx(record_shapes=True)
    # emit_nvtx.__enter__ synchronizes first, which would initialise CUDA in
    # every process at start-up: not for this call.
    synchronize = torch.cuda.synchronize
    torch.cuda.synchronize = lambda device=None: None
    try:
        context.__enter__()
    except Exception as e:
        _shardscope_fail(
            "torch.autograd.profiler.emit_nvtx(record_shapes=True) failed (%s: %s)"
            % (type(e).__name__, e))
    finally:
        torch.cuda.synchronize = synchronize
    return context


_shardscope_chain()
_shardscope_emit_nvtx_context = _shardscope_emit_nvtx()
)PY";

std::string first_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  char c;
  while (line.size() < 256 && in.get(c) && c != '\n') line.push_back(c);
  return line;
}

std::string file_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string torch_shapes_sitecustomize() {
  return kSitecustomize;
}

void write_torch_shapes_site(const std::string& dir) {
  const std::string path = dir + "/sitecustomize.py";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << kSitecustomize;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
}

bool is_python_command(const std::string& argv0, const std::string& path, std::string* resolved) {
  resolved->clear();
  if (argv0.empty()) return false;
  if (argv0.find('/') != std::string::npos) {
    if (access(argv0.c_str(), X_OK) == 0) *resolved = argv0;
  } else {
    size_t begin = 0;
    while (begin <= path.size()) {
      size_t end = path.find(':', begin);
      if (end == std::string::npos) end = path.size();
      const std::string dir = end > begin ? path.substr(begin, end - begin) : ".";
      const std::string candidate = dir + "/" + argv0;
      if (access(candidate.c_str(), X_OK) == 0) {
        *resolved = candidate;
        break;
      }
      begin = end + 1;
    }
  }
  if (resolved->empty()) return false;
  if (file_name(argv0).rfind("python", 0) == 0 || file_name(*resolved).rfind("python", 0) == 0)
    return true;
  const std::string line = first_line(*resolved);
  return line.rfind("#!", 0) == 0 && line.find("python") != std::string::npos;
}

}  // namespace shardscope::profiler

// `shardscope profile --torch-shapes`: PyTorch's NVTX op ranges with input
// shapes, for an unmodified Python program. A generated sitecustomize.py,
// first on PYTHONPATH, enters torch.autograd.profiler.emit_nvtx(
// record_shapes=True) in every Python process of the command (inherited by
// torchrun's workers through the environment) before the program runs, and
// then runs the sitecustomize it hides, if any. profiler/cupti/torch_ops.h
// turns the ranges into kernels' op types and FLOPs (docs/profiler.md).
//
// emit_nvtx's own __enter__ calls torch.cuda.synchronize(), which would
// initialise CUDA (on device 0) in every process at start-up, launchers
// included: it is stubbed out for that call, nothing else is changed.
// emit_nvtx's profiler state is thread-local: ops of the main thread and of
// autograd's backward threads (which inherit it) get ranges; ops run on
// other threads do not.
#pragma once

#include <string>

namespace shardscope::profiler {

// The sitecustomize.py. Failure modes, each a message on stderr naming
// --torch-shapes, <pid>.error in $SHARDSCOPE_PROFILE_DIR (read by `profile`)
// and exit status 2 before the program runs: torch cannot be imported, or
// emit_nvtx cannot be entered (a PyTorch built without CUDA).
std::string torch_shapes_sitecustomize();

// Writes it as <dir>/sitecustomize.py (dir exists). Throws std::runtime_error
// naming the file when it cannot be written.
void write_torch_shapes_site(const std::string& dir);

// Whether `argv0` runs a Python program: its file name starts with "python"
// (python, python3, python3.12), or it is a script whose "#!" line names
// python (torchrun, accelerate, a script with a python #! line). A name
// without '/' is looked up in `path` (PATH's value). *resolved: the file
// found ("" when none is: then the answer is false).
bool is_python_command(const std::string& argv0, const std::string& path, std::string* resolved);

}  // namespace shardscope::profiler

// `profile --torch-shapes`: the generated sitecustomize.py, run by the real
// python3 against a stand-in torch package (torch itself is not needed),
// and the check that the command runs Python.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "profiler/torch_shapes.h"
#include "tests/temp_dir.h"

using shardscope::test::TempDir;
namespace fs = std::filesystem;

namespace {

struct Run {
  int status = -1;
  std::string output;
};

Run run(const std::string& cmd) {
  Run r;
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A stand-in for torch: emit_nvtx records how it was entered, and
// torch.cuda.synchronize says when it is called (it would initialise CUDA).
void fake_torch(const fs::path& root) {
  write(root / "torch" / "__init__.py",
        "import types\n"
        "cuda = types.SimpleNamespace()\n"
        "def _synchronize(device=None):\n"
        "    print('torch.cuda.synchronize called')\n"
        "cuda.synchronize = _synchronize\n");
  write(root / "torch" / "autograd" / "__init__.py", "");
  write(root / "torch" / "autograd" / "profiler.py",
        "import torch\n"
        "entered = []\n"
        "class emit_nvtx:\n"
        "    def __init__(self, enabled=True, record_shapes=False):\n"
        "        self.record_shapes = record_shapes\n"
        "    def __enter__(self):\n"
        "        torch.cuda.synchronize()\n"
        "        entered.append(self.record_shapes)\n"
        "        return self\n");
}

}  // namespace

TEST_CASE(
    "torch shapes: the sitecustomize enters emit_nvtx(record_shapes=True) without "
    "initialising CUDA, after the sitecustomize it hides",
    "[profiler][nvtx]") {
  TempDir site, lib;
  shardscope::profiler::write_torch_shapes_site(site.path.string());
  fake_torch(lib.path);
  write(lib.path / "sitecustomize.py", "print('user sitecustomize ran')\n");
  const Run r = run("PYTHONPATH=" + site.path.string() + ":" + lib.path.string() +
                    " python3 -c \"import torch.autograd.profiler as p, torch; "
                    "print('entered', p.entered); torch.cuda.synchronize()\"");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output == "user sitecustomize ran\nentered [True]\ntorch.cuda.synchronize called\n");
}

TEST_CASE(
    "torch shapes: without torch the program does not run: exit 2, a message and an "
    ".error file",
    "[profiler][nvtx]") {
  TempDir site, profile_dir;
  shardscope::profiler::write_torch_shapes_site(site.path.string());
  const Run r = run("SHARDSCOPE_PROFILE_DIR=" + profile_dir.path.string() +
                    " PYTHONPATH=" + site.path.string() + " python3 -c \"print('program ran')\"");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("program ran") == std::string::npos);
  CHECK(r.output.find("shardscope profile --torch-shapes (pid ") != std::string::npos);
  CHECK(r.output.find("cannot import torch (ModuleNotFoundError") != std::string::npos);
  int errors = 0;
  for (const auto& e : fs::directory_iterator(profile_dir.path))
    if (e.path().extension() == ".error") ++errors;
  CHECK(errors == 1);
}

TEST_CASE("torch shapes: which commands run Python", "[profiler][nvtx]") {
  TempDir dir;
  const auto script = [&](const std::string& name, const std::string& text) {
    const fs::path p = dir.path / name;
    write(p, text);
    fs::permissions(p, fs::perms::owner_all);
    return p.string();
  };
  const std::string path = "/usr/bin:/bin:" + dir.path.string();
  std::string resolved;
  CHECK(shardscope::profiler::is_python_command(
      script("train.py", "#!/usr/bin/env python3\nprint(1)\n"), path, &resolved));
  CHECK(shardscope::profiler::is_python_command(
      script("torchrun", "#!/opt/venv/bin/python3.12\n# -*- coding: utf-8 -*-\n"), path,
      &resolved));
  CHECK(shardscope::profiler::is_python_command("torchrun", path, &resolved));
  CHECK(resolved == (dir.path / "torchrun").string());
  CHECK(shardscope::profiler::is_python_command(script("python3.12",
                                                       "\x7f"
                                                       "ELF"),
                                                path, &resolved));
  CHECK_FALSE(shardscope::profiler::is_python_command(
      script("run.sh", "#!/bin/sh\npython3 train.py\n"), path, &resolved));
  CHECK_FALSE(shardscope::profiler::is_python_command("run.sh", path, &resolved));
  CHECK(resolved == (dir.path / "run.sh").string());
  CHECK_FALSE(shardscope::profiler::is_python_command("no-such-command", path, &resolved));
  CHECK(resolved.empty());
}

# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "csa"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.csa_obj_root, "test")
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py",
                   "unit"]

# Captured FileCheck variables do not leak across CHECK-LABELs.
config.environment["FILECHECK_OPTS"] = "--enable-var-scope --dump-input-context=20"
# Every emulated GPU run with CUDA graphs checks each graph for hazards
# (ExecutorOptions::checkGraphHazards): a missing edge between two launches
# touching the same bytes fails the test that made it.
config.environment["CSA_CUDA_CHECK_HAZARDS"] = "1"

config.substitutions.append(("%csa_src", config.csa_src_root))
config.substitutions.append(("%csa_obj", config.csa_obj_root))
llvm_config.use_default_substitutions()
llvm_config.add_tool_substitutions(
    ["csa-opt", "csa-compile", "csa-checkpoint", "csa-reference", "csa-run",
     "csa-op-abi", "csa-diff", "csa-gpu-check", "csa-score", "csa-api-test"],
    [config.csa_tools_dir, config.llvm_tools_dir])
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

# The tools themselves run under ASan/UBSan (build-asan/, sanitize.sh): a
# test of what only a plain build does (csa-run refusing instrumented
# kernels) says `UNSUPPORTED: asan`.
if getattr(config, "csa_sanitize", False):
    config.available_features.add("asan")

# numpy (Debian's python3-numpy) checks the Engram golden values.
import subprocess
for python in ["/usr/bin/python3", "python3"]:
    try:
        subprocess.run([python, "-c", "import numpy"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError):
        continue
    config.available_features.add("numpy")
    config.substitutions.append(("%numpy_python", python))
    break

# matplotlib (Debian's python3-matplotlib, installed by setup.sh) draws
# bench/plot.py's figures; without it the plot tests fail, saying so.
plot_python = None
for python in ["/usr/bin/python3", "python3"]:
    try:
        subprocess.run([python, "-c", "import matplotlib, numpy"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError):
        continue
    plot_python = python
    break
config.substitutions.append(
    ("%plot_python", plot_python or
     "sh -c 'echo matplotlib is missing: run tools/scripts/setup.sh >&2; exit 1' --"))

# The Python module csa (runtime/api/python; pybind11-dev and python3-dev,
# installed by setup.sh) with its interpreter; without it the tests that
# use it fail, saying so.
config.substitutions.append(
    ("%csa_python", config.csa_module_python or
     "sh -c 'echo the Python module csa was not built: pybind11-dev and "
     "python3-dev are missing, run tools/scripts/setup.sh >&2; exit 1' --"))

# The CUDA toolkit (no GPU needed): ptxas assembles the generated PTX, and
# libdevice supplies the transcendentals --emit=ptx links in.
cuda_root = os.environ.get("CUDA_HOME", "/usr/local/cuda")
ptxas = os.path.join(cuda_root, "bin", "ptxas")
if os.path.exists(os.path.join(cuda_root, "nvvm", "libdevice", "libdevice.10.bc")):
    config.available_features.add("libdevice")
if os.path.exists(ptxas):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))

# lit configuration of graphc's FileCheck tests.
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "graphc"
# The external shell (bash) so tests can check exact exit codes with $?.
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs",
                   "unit", "cmake"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.graphc_obj_root, "test")

llvm_config.use_default_substitutions()
config.substitutions.append(("%models", os.path.join(config.graphc_src_root, "models")))
config.substitutions.append(("%python", config.python_executable))
llvm_config.with_environment("PATH", config.graphc_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(["graphc", "graphc-opt", "graphrun"],
                                   [config.graphc_tools_dir])
llvm_config.add_tool_substitutions(["llvm-objdump"], [config.llvm_tools_dir])

# ptxas (CUDA toolkit) assembles the generated PTX; no GPU is needed.
ptxas = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")
if os.path.exists(ptxas):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))

# A CPU that runs x86-64-v4 (AVX-512 F/BW/CD/DQ/VL) code, where graphrun
# loads a plan's x86-64-v4 kernels over its x86-64-v3 ones.
try:
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next((line.split(":", 1)[1].split() for line in cpuinfo
                      if line.startswith("flags")), [])
    if all(f in flags for f in ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")):
        config.available_features.add("x86-64-v4")
except OSError:
    pass

# Open MPI's launcher (Debian's openmpi-bin, which setup.sh installs) for the
# multi-rank tests; as root it needs these two variables to start.
import shutil
import subprocess
if shutil.which("mpirun"):
    config.available_features.add("mpirun")
    config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"

# Two "nodes" in network namespaces (test/runtime/two-nodes.test): root and
# iproute2, and a kernel that lets this process create a namespace.
if os.geteuid() == 0 and shutil.which("ip") and shutil.which("tc"):
    probe = "graphc-lit-probe-%d" % os.getpid()
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode == 0:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
        config.available_features.add("netns")
        # graphc-linkem's emulated links (test/runtime/emulated-nodes.test):
        # TUN devices, and ping to see their delay.
        if os.access("/dev/net/tun", os.R_OK | os.W_OK) and shutil.which("ping"):
            config.available_features.add("tun")

# Debian's dataset-fashion-mnist (setup.sh installs it).
if os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
    config.available_features.add("fashion-mnist")

# A Python with NumPy (Debian's python3-numpy, which setup.sh installs, lives
# with /usr/bin/python3) for the float64 reference of the gradient check.
import subprocess
for python in (config.python_executable, "/usr/bin/python3"):
    if subprocess.run([python, "-c", "import numpy"], capture_output=True).returncode == 0:
        config.available_features.add("numpy")
        config.substitutions.append(("%numpy_python", python))
        # With Pillow (python3-pil) it writes the image-folder tests' JPEGs.
        if subprocess.run([python, "-c", "import PIL"], capture_output=True).returncode == 0:
            config.available_features.add("pil")
        break

# A Python with ONNX (Debian's python3-onnx, which setup.sh installs) to write
# the models the ONNX import tests read.
for python in (config.python_executable, "/usr/bin/python3"):
    if subprocess.run([python, "-c", "import onnx, numpy"], capture_output=True).returncode == 0:
        config.available_features.add("onnx")
        config.substitutions.append(("%onnx_python", python))
        break

# ONNX's backend node tests (Debian's libonnx-testdata, which setup.sh installs).
if os.path.isdir("/usr/share/libonnx-testdata/data/node"):
    config.available_features.add("onnx-testdata")

# lit runs several tests at once, each graphrun with one OpenMP thread per core:
# more threads than cores. libgomp's default spin-waiting at every parallel
# region then burns the time slices the other threads need (steps measured 10x
# slower); passive waiting keeps the tests fast. Throughput is measured by
# benchmarks/, never here.
config.environment["OMP_WAIT_POLICY"] = "PASSIVE"
# Two threads per graphrun by default, whatever the machine has: results that
# depend on the order of sums (oneDNN splits convolutions by thread count) are
# then the same on a 2-core VM and a 64-core host, and lit's parallel tests do
# not each start one thread per core. Tests about thread counts pass --threads.
config.environment["OMP_NUM_THREADS"] = "2"

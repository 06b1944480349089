/* A stand-in CUDA driver (libcuda.so.1) for tests/test_fork_safety.py: every entry point TVM's
 * CUDA runtime links or looks up writes "driver PID PPID NAME" to the file named by
 * CL_VALIDATE_TEST_DRIVER_LOG and answers CUDA_ERROR_NO_DEVICE (100), so a machine without a
 * GPU shows which process would have started the driver. cuDeviceGetCount answers
 * CUDA_ERROR_NOT_INITIALIZED (3) until cuInit was called, and 0 devices after, without
 * writing: that is how a process asks, without starting it, whether the driver was started
 * (cl_validate.compile.devices). Built by the tests with the system's cc. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int note(const char *name) {
    const char *path = getenv("CL_VALIDATE_TEST_DRIVER_LOG");
    if (path) {
        FILE *f = fopen(path, "a");
        if (f) {
            fprintf(f, "driver %d %d %s\n", (int)getpid(), (int)getppid(), name);
            fclose(f);
        }
    }
    return 100;
}

static int started = 0;

/* Started, even if it finds no device: what cuDeviceGetCount tells from then on. */
int cuInit(unsigned int flags) { (void)flags; started = 1; return note("cuInit"); }

#define ENTRY(name) int name(void) { return note(#name); }
ENTRY(cuDriverGetVersion)
ENTRY(cuGetProcAddress)
ENTRY(cuGetProcAddress_v2)
ENTRY(cuGetProcAddress_v3)
ENTRY(cuDeviceGet)
ENTRY(cuDeviceGetName)
ENTRY(cuDeviceGetAttribute)
ENTRY(cuCtxGetCurrent)
ENTRY(cuFuncSetAttribute)
ENTRY(cuGetErrorName)
ENTRY(cuGetErrorString)
ENTRY(cuLaunchKernel)
ENTRY(cuLaunchKernelEx)
ENTRY(cuModuleGetFunction)
ENTRY(cuModuleLoadData)
ENTRY(cuModuleUnload)
ENTRY(cuTensorMapEncodeTiled)

int cuDeviceGetCount(int *count) {
    if (!started) return 3;
    *count = 0;
    return 0;
}

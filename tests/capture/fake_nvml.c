/* A test double of libnvidia-ml.so.1 for machines without a GPU: the NVML C functions pynvml calls,
 * answering from environment variables (comma-separated, one value per device):
 *   FAKE_NVML_UTIL     GPU-Util in percent     FAKE_NVML_MEM_MIB  memory used in MiB
 *   FAKE_NVML_POWER_W  power draw in watts
 *   FAKE_NVML_READS_FILE  (optional) a file that gets one byte per power read: a test waits on it to know
 *                         how many sampling rounds have happened, instead of sleeping
 * The device count is the number of FAKE_NVML_UTIL values. Build: cc -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.c
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct { unsigned int gpu; unsigned int memory; } nvmlUtilization_t;
typedef struct { unsigned long long total; unsigned long long free; unsigned long long used; } nvmlMemory_t;

static unsigned int value(const char *var, unsigned int index, int *count) {
    const char *s = getenv(var);
    unsigned int i = 0, v = 0;
    if (count) *count = 0;
    if (!s || !*s) return 0;
    while (*s) {
        char *end;
        unsigned long x = strtoul(s, &end, 10);
        if (i == index) v = (unsigned int)x;
        i++;
        s = (*end == ',') ? end + 1 : end;
        if (end == s && *s) break;
    }
    if (count) *count = (int)i;
    return v;
}

static unsigned int devices(void) { int n; value("FAKE_NVML_UTIL", 0, &n); return (unsigned int)n; }

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return devices() ? 0 : 9; /* NVML_ERROR_DRIVER_NOT_LOADED */ }
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(nvmlReturn_t r) { return r ? "fake NVML error" : "Success"; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { *n = devices(); return 0; }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **handle) {
    if (index >= devices()) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *handle = (void *)(unsigned long)(index + 1);
    return 0;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, void **handle) {
    /* "GPU-fake-<index>" */
    const char *p = strrchr(uuid, '-');
    if (!p || strncmp(uuid, "GPU-fake-", 9)) return 6; /* NVML_ERROR_NOT_FOUND */
    return nvmlDeviceGetHandleByIndex_v2((unsigned int)atoi(p + 1), handle);
}

static unsigned int idx(void *handle) { return (unsigned int)(unsigned long)handle - 1; }

nvmlReturn_t nvmlDeviceGetUtilizationRates(void *h, nvmlUtilization_t *u) {
    u->gpu = value("FAKE_NVML_UTIL", idx(h), 0);
    u->memory = 0;
    return 0;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
    m->used = (unsigned long long)value("FAKE_NVML_MEM_MIB", idx(h), 0) << 20;
    m->total = 24ULL << 30;
    m->free = m->total - m->used;
    return 0;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(void *h, unsigned int *mw) {
    const char *reads = getenv("FAKE_NVML_READS_FILE");
    if (reads && *reads) {
        FILE *f = fopen(reads, "a");
        if (f) { fputc('.', f); fclose(f); }
    }
    *mw = value("FAKE_NVML_POWER_W", idx(h), 0) * 1000;
    return 0;
}

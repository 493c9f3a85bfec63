/*
 * A fake libcuda.so.1 for gfd's tests: no GPU, no driver, the real CUDA driver ABI.
 *
 * Built at test time against the real cuda.h (wheel nvidia-cuda-runtime-cu12), so the
 * compiler checks every prototype below. __CUDA_API_VERSION_INTERNAL makes cuda.h
 * declare the legacy entry points too, as libcuda's own build sees them: the
 * unversioned cuDeviceTotalMem takes an unsigned int (cuda.h otherwise maps the name
 * to cuDeviceTotalMem_v2), so both prototypes are checked.
 *
 * The machine comes from a profile file named by $FAKE_CUDA_PROFILE (written by
 * tests/fakes/fakecuda.py; format in parse_line below), read again by every cuInit.
 *
 * - Every device call before a successful cuInit answers CUDA_ERROR_NOT_INITIALIZED;
 *   cuDriverGetVersion, cuGetErrorName and cuGetErrorString work without it, as in
 *   the real library.
 * - Forced errors: "init_error" for cuInit, "fail <symbol> <error>" for one call
 *   (for every device before the first "gpu" record, else for that device only).
 * - Built with -DFAKE_CUDA_NO_V2 it lacks cuDeviceTotalMem_v2 and cuDeviceGetUuid_v2,
 *   like a driver that predates them.
 * - Extra symbols for tests: fake_cuda_init_count, fake_cuda_call_count,
 *   fake_cuda_reset.
 */

#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#define MAX_GPUS 8
#define MAX_FAILS 16
#define SYM_LEN 64
#define NAME_LEN 256

/* ------------------------------------------------------------------ errors */

static const struct {
    const char *name;
    CUresult code;
    const char *text;
} ERRORS[] = {
    {"CUDA_SUCCESS", CUDA_SUCCESS, "no error"},
    {"CUDA_ERROR_INVALID_VALUE", CUDA_ERROR_INVALID_VALUE, "invalid argument"},
    {"CUDA_ERROR_OUT_OF_MEMORY", CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
    {"CUDA_ERROR_NOT_INITIALIZED", CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
    {"CUDA_ERROR_DEINITIALIZED", CUDA_ERROR_DEINITIALIZED, "driver shutting down"},
    {"CUDA_ERROR_STUB_LIBRARY", CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"},
    {"CUDA_ERROR_DEVICE_UNAVAILABLE", CUDA_ERROR_DEVICE_UNAVAILABLE,
     "CUDA-capable device(s) is/are busy or unavailable"},
    {"CUDA_ERROR_NO_DEVICE", CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"},
    {"CUDA_ERROR_INVALID_DEVICE", CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
    {"CUDA_ERROR_OPERATING_SYSTEM", CUDA_ERROR_OPERATING_SYSTEM,
     "OS call failed or operation not supported on this OS"},
    {"CUDA_ERROR_INVALID_HANDLE", CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
    {"CUDA_ERROR_NOT_PERMITTED", CUDA_ERROR_NOT_PERMITTED, "operation not permitted"},
    {"CUDA_ERROR_NOT_SUPPORTED", CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
    {"CUDA_ERROR_SYSTEM_NOT_READY", CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"},
    {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
     "system has unsupported display driver / cuda driver combination"},
    {"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
     "forward compatibility was attempted on non supported HW"},
    {"CUDA_ERROR_UNKNOWN", CUDA_ERROR_UNKNOWN, "unknown error"},
};
#define N_ERRORS (sizeof(ERRORS) / sizeof(ERRORS[0]))

static int error_from_name(const char *name, CUresult *out)
{
    for (size_t i = 0; i < N_ERRORS; i++) {
        if (strcmp(ERRORS[i].name, name) == 0) {
            *out = ERRORS[i].code;
            return 0;
        }
    }
    return -1;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < N_ERRORS; i++) {
        if (ERRORS[i].code == error) {
            *pStr = ERRORS[i].name;
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < N_ERRORS; i++) {
        if (ERRORS[i].code == error) {
            *pStr = ERRORS[i].text;
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ model */

struct fail {
    char symbol[SYM_LEN];
    CUresult code;
};

struct gpu {
    char name[NAME_LEN];
    unsigned long long memory;
    int cc_major, cc_minor;
    unsigned char uuid[16];
    int n_fail;
    struct fail fails[MAX_FAILS];
};

struct machine {
    int driver_version;
    CUresult init_error;
    int n_fail;
    struct fail fails[MAX_FAILS];
    int n_gpu;
    struct gpu gpus[MAX_GPUS];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct machine machine;
static int loaded, initialised;
static unsigned long init_count;
static struct {
    const char *name;
    unsigned long count;
} counts[32];

static void count_call(const char *name)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        if (counts[i].name == NULL || strcmp(counts[i].name, name) == 0) {
            counts[i].name = name;
            counts[i].count++;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
}

unsigned long fake_cuda_init_count(void)
{
    return init_count;
}

/* Calls of symbol since the last reset (every call when symbol is NULL). */
unsigned long fake_cuda_call_count(const char *symbol)
{
    unsigned long total = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]) && counts[i].name; i++)
        if (symbol == NULL || strcmp(counts[i].name, symbol) == 0)
            total += counts[i].count;
    pthread_mutex_unlock(&lock);
    return total;
}

/* Forget the session and the counters, as a fresh process would start. */
void fake_cuda_reset(void)
{
    pthread_mutex_lock(&lock);
    initialised = 0;
    loaded = 0;
    init_count = 0;
    memset(counts, 0, sizeof(counts));
    pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------ parsing */

static int parse_hex_uuid(const char *hex, unsigned char out[16])
{
    size_t n = 0;
    for (const char *p = hex; *p && *p != '\n'; p++) {
        if (*p == '-')
            continue;
        unsigned v;
        if (*p >= '0' && *p <= '9')
            v = (unsigned)(*p - '0');
        else if (*p >= 'a' && *p <= 'f')
            v = (unsigned)(*p - 'a' + 10);
        else if (*p >= 'A' && *p <= 'F')
            v = (unsigned)(*p - 'A' + 10);
        else
            return -1;
        if (n >= 32)
            return -1;
        if (n % 2 == 0)
            out[n / 2] = (unsigned char)(v << 4);
        else
            out[n / 2] |= (unsigned char)v;
        n++;
    }
    return n == 32 ? 0 : -1;
}

/*
 * One record per line: "<key> <fields...>"; '#' starts a comment line.
 *
 *   fake-cuda 1                    format marker (optional)
 *   driver_version <int>           cuDriverGetVersion, e.g. 12020 for CUDA 12.2
 *   init_error <CUDA_ERROR_...>    returned by cuInit
 *   fail <symbol> <CUDA_ERROR_...> before any "gpu": every call of <symbol>;
 *                                  after one: calls of <symbol> for that device
 *   gpu                            starts the next device (ordinal = order)
 *   name <text to end of line>     cuDeviceGetName
 *   memory <bytes>                 cuDeviceTotalMem_v2 (the legacy call saturates at 4 GiB)
 *   cc <major> <minor>             COMPUTE_CAPABILITY_MAJOR / _MINOR
 *   uuid <32 hex digits, '-' ok>   cuDeviceGetUuid(_v2)
 */
static int parse_line(struct machine *m, char *line, const char **why)
{
    char key[32], a[SYM_LEN], b[SYM_LEN];
    int off = 0;
    struct gpu *g = m->n_gpu > 0 ? &m->gpus[m->n_gpu - 1] : NULL;

    line[strcspn(line, "\n")] = '\0';
    if (line[0] == '#' || sscanf(line, "%31s%n", key, &off) != 1)
        return 0;
    const char *rest = line + off;
    while (*rest == ' ' || *rest == '\t')
        rest++;

    if (strcmp(key, "fake-cuda") == 0)
        return 0;
    if (strcmp(key, "gpu") == 0) {
        if (m->n_gpu >= MAX_GPUS) {
            *why = "too many GPUs";
            return -1;
        }
        m->n_gpu++;
        return 0;
    }
    if (strcmp(key, "driver_version") == 0) {
        if (sscanf(rest, "%d", &m->driver_version) != 1) {
            *why = "bad driver_version";
            return -1;
        }
    } else if (strcmp(key, "init_error") == 0) {
        if (error_from_name(rest, &m->init_error) != 0) {
            *why = "unknown error name";
            return -1;
        }
    } else if (strcmp(key, "fail") == 0) {
        int *n = g ? &g->n_fail : &m->n_fail;
        struct fail *fails = g ? g->fails : m->fails;
        if (sscanf(rest, "%63s %63s", a, b) != 2 || *n >= MAX_FAILS ||
            error_from_name(b, &fails[*n].code) != 0) {
            *why = "bad fail record (fields, error name, or too many)";
            return -1;
        }
        snprintf(fails[*n].symbol, sizeof(fails[*n].symbol), "%s", a);
        (*n)++;
    } else if (g == NULL) {
        *why = "device record before any 'gpu'";
        return -1;
    } else if (strcmp(key, "name") == 0) {
        snprintf(g->name, sizeof(g->name), "%s", rest);
    } else if (strcmp(key, "memory") == 0) {
        if (sscanf(rest, "%llu", &g->memory) != 1) {
            *why = "bad memory";
            return -1;
        }
    } else if (strcmp(key, "cc") == 0) {
        if (sscanf(rest, "%d %d", &g->cc_major, &g->cc_minor) != 2) {
            *why = "bad cc";
            return -1;
        }
    } else if (strcmp(key, "uuid") == 0) {
        if (parse_hex_uuid(rest, g->uuid) != 0) {
            *why = "bad uuid";
            return -1;
        }
    } else {
        *why = "unknown key";
        return -1;
    }
    return 0;
}

/* Read $FAKE_CUDA_PROFILE into the machine; CUDA_SUCCESS or CUDA_ERROR_UNKNOWN (reported). */
static CUresult load_profile(void)
{
    const char *path = getenv("FAKE_CUDA_PROFILE");
    if (path == NULL || *path == '\0') {
        fprintf(stderr, "fake_cuda: FAKE_CUDA_PROFILE is not set\n");
        return CUDA_ERROR_UNKNOWN;
    }
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "fake_cuda: cannot open profile %s: %s\n", path, strerror(errno));
        return CUDA_ERROR_UNKNOWN;
    }
    static struct machine next;
    memset(&next, 0, sizeof(next));
    char line[512];
    int lineno = 0;
    CUresult result = CUDA_SUCCESS;
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *why = NULL;
        lineno++;
        if (parse_line(&next, line, &why) != 0) {
            fprintf(stderr, "fake_cuda: %s:%d: %s\n", path, lineno, why);
            result = CUDA_ERROR_UNKNOWN;
            break;
        }
    }
    fclose(f);
    if (result == CUDA_SUCCESS) {
        machine = next;
        loaded = 1;
    }
    return result;
}

/* ------------------------------------------------------------------ helpers */

static CUresult forced(const struct fail *fails, int n, const char *symbol)
{
    for (int i = 0; i < n; i++)
        if (strcmp(fails[i].symbol, symbol) == 0)
            return fails[i].code;
    return CUDA_SUCCESS;
}

/* The common prologue of a call: count it, then the session, then forced failures. */
static CUresult enter(const char *symbol)
{
    count_call(symbol);
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    return forced(machine.fails, machine.n_fail, symbol);
}

/* enter() for a call on one device: also checks the ordinal and that device's failures. */
static CUresult enter_device(const char *symbol, CUdevice dev, const struct gpu **out)
{
    CUresult r = enter(symbol);
    if (r != CUDA_SUCCESS)
        return r;
    if (dev < 0 || dev >= machine.n_gpu)
        return CUDA_ERROR_INVALID_DEVICE;
    *out = &machine.gpus[dev];
    return forced((*out)->fails, (*out)->n_fail, symbol);
}

/* ------------------------------------------------------------------ API */

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    count_call("cuInit");
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = load_profile();
    if (r == CUDA_SUCCESS)
        r = machine.init_error;
    initialised = r == CUDA_SUCCESS;
    if (initialised)
        init_count++;
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    count_call("cuDriverGetVersion");
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!loaded) {
        pthread_mutex_lock(&lock);
        CUresult r = load_profile();
        pthread_mutex_unlock(&lock);
        if (r != CUDA_SUCCESS)
            return r;
    }
    CUresult r = forced(machine.fails, machine.n_fail, "cuDriverGetVersion");
    if (r != CUDA_SUCCESS)
        return r;
    *driverVersion = machine.driver_version;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    CUresult r = enter("cuDeviceGetCount");
    if (r != CUDA_SUCCESS)
        return r;
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = machine.n_gpu;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    const struct gpu *g;
    CUresult r = enter_device("cuDeviceGet", ordinal, &g);
    if (r != CUDA_SUCCESS)
        return r;
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    const struct gpu *g;
    CUresult r = enter_device("cuDeviceGetName", dev, &g);
    if (r != CUDA_SUCCESS)
        return r;
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", g->name);
    return CUDA_SUCCESS;
}

#ifndef FAKE_CUDA_NO_V2
CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    const struct gpu *g;
    CUresult r = enter_device("cuDeviceTotalMem_v2", dev, &g);
    if (r != CUDA_SUCCESS)
        return r;
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)g->memory;
    return CUDA_SUCCESS;
}
#endif

/* The pre-CUDA-3.2 entry point: 32 bits, saturating. */
CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    const struct gpu *g;
    CUresult r = enter_device("cuDeviceTotalMem", dev, &g);
    if (r != CUDA_SUCCESS)
        return r;
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = g->memory > UINT_MAX ? UINT_MAX : (unsigned int)g->memory;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    const struct gpu *g;
    CUresult r = enter_device("cuDeviceGetAttribute", dev, &g);
    if (r != CUDA_SUCCESS)
        return r;
    if (pi == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *pi = g->cc_major;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *pi = g->cc_minor;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
        *pi = 1; /* every device this fake models is a Tegra iGPU */
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE; /* not modelled */
    }
}

static CUresult get_uuid(const char *symbol, CUuuid *uuid, CUdevice dev)
{
    const struct gpu *g;
    CUresult r = enter_device(symbol, dev, &g);
    if (r != CUDA_SUCCESS)
        return r;
    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, g->uuid, sizeof(uuid->bytes));
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return get_uuid("cuDeviceGetUuid", uuid, dev);
}

#ifndef FAKE_CUDA_NO_V2
CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return get_uuid("cuDeviceGetUuid_v2", uuid, dev);
}
#endif

/*
 * A fake libnvidia-ml.so.1 for gfd's tests: no GPU, no driver, real NVML ABI.
 *
 * Built at test time against the real nvml.h (wheel nvidia-nvml-dev), so the
 * compiler checks every prototype and struct layout below. The machine it
 * pretends to be comes from a profile file named by $FAKE_NVML_PROFILE (written
 * by tests/fakes/fakenvml.py; format described there and in parse_line below).
 *
 * - The profile is (re)loaded by nvmlInitWithFlags / nvmlInit_v2, and re-read by
 *   nvmlDeviceGetCount_v2 when the file's mtime, size or inode changed, so a test
 *   can swap the machine under an agent that keeps NVML initialised.
 *   That is the live mode: a session kept open across a MIG reconfiguration (or
 *   any other change of the machine) sees the new layout from the first
 *   nvmlDeviceGetCount_v2 after the file changed, without nvmlShutdown/nvmlInit;
 *   calls made before that count still answer from the previous machine (gfd asks
 *   the driver and CUDA versions first, so it sees a new driver version one read
 *   late; GPUs and MIG layouts, read after the count, at once).
 * - Every call before init (or after the last nvmlShutdown) answers
 *   NVML_ERROR_UNINITIALIZED; nvmlShutdown decrements a refcount.
 * - Handles are pointers into static arrays that encode the GPU index, MIG slot,
 *   GPU-instance id and compute-instance id; they stay valid across reloads and
 *   are resolved against the current machine at each call (a GPU gone from the
 *   machine answers GPU_IS_LOST, an emptied MIG slot NOT_FOUND).
 * - Event sets, fed by the test through the FIFO named by $FAKE_NVML_EVENTS:
 *   see the "events" section at the end.
 * - Built with -DFAKE_NVML_OLD_DRIVER it lacks the profile-name (...InfoV) and
 *   fabric symbols, like a driver that predates them (pynvml then raises
 *   NVMLError_FunctionNotFound).
 * - Extra symbols for tests: fake_nvml_init_count, fake_nvml_load_count,
 *   fake_nvml_refcount, fake_nvml_call_count, fake_nvml_reset_counts,
 *   $FAKE_NVML_CALL_LOG (see log_calls), $FAKE_NVML_CALL_TOTALS (see write_call_totals),
 *   fake_nvml_event_set_count.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nvml.h>

#define MAX_GPUS 16
#define MAX_MIG_SLOTS 8
#define MAX_GIP 24          /* GPU-instance profiles per GPU */
#define MAX_CIP 96          /* compute-instance profiles per GPU (all GI profiles) */
#define MAX_GI 16           /* GPU instances per GPU */
#define MAX_GI_ID 32        /* GPU-instance ids are 0..31 */
#define MAX_CI_ID 8         /* compute-instance ids are 0..7 */
#define MAX_FAILS 16
#define SYM_LEN 80
#define STR_LEN 96

/* ------------------------------------------------------------------ errors */

static const struct {
    const char *name;
    nvmlReturn_t code;
    const char *text;
} ERRORS[] = {
    {"SUCCESS", NVML_SUCCESS, "Success"},
    {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED, "Uninitialized"},
    {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"},
    {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
    {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"},
    {"ALREADY_INITIALIZED", NVML_ERROR_ALREADY_INITIALIZED, "Already Initialized"},
    {"NOT_FOUND", NVML_ERROR_NOT_FOUND, "Not Found"},
    {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"},
    {"INSUFFICIENT_POWER", NVML_ERROR_INSUFFICIENT_POWER, "Insufficient External Power"},
    {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
    {"TIMEOUT", NVML_ERROR_TIMEOUT, "Timeout"},
    {"IRQ_ISSUE", NVML_ERROR_IRQ_ISSUE, "Interrupt Request Issue"},
    {"LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"},
    {"FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found"},
    {"CORRUPTED_INFOROM", NVML_ERROR_CORRUPTED_INFOROM, "Corrupted infoROM"},
    {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST, "GPU is lost"},
    {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED, "GPU requires restart"},
    {"OPERATING_SYSTEM", NVML_ERROR_OPERATING_SYSTEM,
     "The operating system has blocked the request."},
    {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH,
     "RM has detected an NVML/RM version mismatch."},
    {"IN_USE", NVML_ERROR_IN_USE, "In use by another client"},
    {"MEMORY", NVML_ERROR_MEMORY, "Insufficient Memory"},
    {"NO_DATA", NVML_ERROR_NO_DATA, "No data"},
    {"INSUFFICIENT_RESOURCES", NVML_ERROR_INSUFFICIENT_RESOURCES,
     "Ran out of critical resources, other than memory"},
    {"ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
     "The provided version is invalid/unsupported"},
    {"DEPRECATED", NVML_ERROR_DEPRECATED, "The requested functionality has been deprecated"},
    {"NOT_READY", NVML_ERROR_NOT_READY, "The system is not ready for the request"},
    {"GPU_NOT_FOUND", NVML_ERROR_GPU_NOT_FOUND, "No GPUs were found"},
    {"INVALID_STATE", NVML_ERROR_INVALID_STATE, "Resource not in correct state"},
    {"UNKNOWN", NVML_ERROR_UNKNOWN, "Unknown Error"},
};
#define N_ERRORS (sizeof(ERRORS) / sizeof(ERRORS[0]))

static int error_from_name(const char *name, nvmlReturn_t *out)
{
    for (size_t i = 0; i < N_ERRORS; i++) {
        if (strcmp(ERRORS[i].name, name) == 0) {
            *out = ERRORS[i].code;
            return 0;
        }
    }
    char *end = NULL;
    long v = strtol(name, &end, 10);
    if (end != name && *end == '\0') {
        *out = (nvmlReturn_t)v;
        return 0;
    }
    return -1;
}

/* ------------------------------------------------------------------ model */

struct fail {
    char symbol[SYM_LEN];
    nvmlReturn_t code;
};

#define MAX_PLACEMENTS 8  /* possible placements per GI profile (memory slices) */

struct gi_profile {
    unsigned index, id, slices, instances, sms, ce, dec, enc, jpeg, ofa, p2p;
    unsigned long long mem_mb;
    char name[STR_LEN];
    unsigned n_place;
    nvmlGpuInstancePlacement_t places[MAX_PLACEMENTS];
};

struct ci_profile {
    unsigned gi_profile_id, index, id, slices, instances, sms;
    char name[STR_LEN];
};

struct compute_instance {
    unsigned id, profile_id, slot, start, size;
    char uuid[STR_LEN];
};

struct gpu_instance {
    unsigned id, profile_id, start, size;
    int n_ci;
    struct compute_instance cis[MAX_CI_ID];
};

struct gpu {
    char name[STR_LEN], uuid[STR_LEN], bus_id[32];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    unsigned long long memory;
    int cc_major, cc_minor;
    unsigned arch, brand;
    int mig_supported;
    unsigned mig_current, mig_pending;
    int compute_mode; /* -1: NOT_SUPPORTED */
    int has_power;    /* 0: power limit constraints NOT_SUPPORTED */
    unsigned power_min, power_max; /* mW */
    unsigned nvlinks, nvlinks_active;
    int has_fabric;
    unsigned fabric_state, fabric_clique;
    nvmlReturn_t fabric_status;
    unsigned char cluster_uuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t fault;     /* every device call on this GPU */
    nvmlReturn_t mig_fault; /* MIG device enumeration calls */
    unsigned max_mig;
    unsigned minor; /* nvmlDeviceGetMinorNumber (/dev/nvidia<minor>) */
    int addressing; /* nvmlDeviceGetAddressingMode value; -1: NOT_SUPPORTED */
    unsigned long long events; /* nvmlDeviceGetSupportedEventTypes */
    int mig_silent; /* a change of its GPU or compute instances sends no event */
    int n_fail;
    struct fail fails[MAX_FAILS];
    int n_gip;
    struct gi_profile gips[MAX_GIP];
    int n_cip;
    struct ci_profile cips[MAX_CIP];
    int n_gi;
    struct gpu_instance gis[MAX_GI];
};

struct machine {
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    char nvml_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int cuda;
    nvmlReturn_t init_error;
    char delay_symbol[SYM_LEN];
    unsigned delay_ms;
    int n_fail;
    struct fail fails[MAX_FAILS];
    nvmlReturn_t flaky;       /* answered at random to a share of the calls ... */
    unsigned flaky_ppm;       /* ... this many per million (0: never) */
    unsigned long long flaky_seed;
    int n_gpu;
    struct gpu gpus[MAX_GPUS];
};

/* ------------------------------------------------------------------ handles */

enum kind { K_GPU = 1, K_MIG, K_GI, K_CI };

struct handle {
    int kind;
    unsigned gpu, slot, gi_id, ci_id;
};

static struct handle gpu_handles[MAX_GPUS];
static struct handle mig_handles[MAX_GPUS][MAX_MIG_SLOTS];
static struct handle gi_handles[MAX_GPUS][MAX_GI_ID];
static struct handle ci_handles[MAX_GPUS][MAX_GI_ID][MAX_CI_ID];

__attribute__((constructor)) static void init_handles(void)
{
    for (unsigned g = 0; g < MAX_GPUS; g++) {
        gpu_handles[g] = (struct handle){K_GPU, g, 0, 0, 0};
        for (unsigned s = 0; s < MAX_MIG_SLOTS; s++)
            mig_handles[g][s] = (struct handle){K_MIG, g, s, 0, 0};
        for (unsigned i = 0; i < MAX_GI_ID; i++) {
            gi_handles[g][i] = (struct handle){K_GI, g, 0, i, 0};
            for (unsigned c = 0; c < MAX_CI_ID; c++)
                ci_handles[g][i][c] = (struct handle){K_CI, g, 0, i, c};
        }
    }
}

#define IN_ARRAY(p, arr) \
    ((const char *)(p) >= (const char *)(arr) && \
     (const char *)(p) < (const char *)(arr) + sizeof(arr))

static const struct handle *as_handle(const void *p)
{
    if (p == NULL)
        return NULL;
    if (IN_ARRAY(p, gpu_handles) || IN_ARRAY(p, mig_handles) || IN_ARRAY(p, gi_handles) ||
        IN_ARRAY(p, ci_handles))
        return (const struct handle *)p;
    return NULL;
}

/* ------------------------------------------------------------------ state */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct machine *current;
static struct machine *retired[8];
static unsigned retired_next;
static int refcount;
static unsigned long init_count, load_count;
static char loaded_path[4096];
static struct stat loaded_stat;

static struct {
    const char *name;
    unsigned long count;
} counts[128];

static const struct machine *machine_now(void)
{
    return __atomic_load_n(&current, __ATOMIC_ACQUIRE);
}

static unsigned long total_calls;

/* $FAKE_NVML_CALL_LOG: nvmlDeviceGetCount_v2 (once per gfd read) appends
 * "<CLOCK_MONOTONIC seconds> <calls so far>" to it, so a benchmark can count the NVML calls
 * a process makes over a window (event waits included) without stopping it. */
static void log_calls(void)
{
    const char *path = getenv("FAKE_NVML_CALL_LOG");
    if (path == NULL || *path == '\0')
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    FILE *f = fopen(path, "a");
    if (f == NULL)
        return;
    fprintf(f, "%ld.%09ld %lu\n", (long)now.tv_sec, now.tv_nsec,
            __atomic_load_n(&total_calls, __ATOMIC_RELAXED));
    fclose(f);
}

/* $FAKE_NVML_CALL_TOTALS: at process exit, write "<symbol> <calls>" for every symbol called
 * and "total <calls>" (what a one-shot process asked NVML, call by call). */
__attribute__((destructor)) static void write_call_totals(void)
{
    const char *path = getenv("FAKE_NVML_CALL_TOTALS");
    if (path == NULL || *path == '\0')
        return;
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]) && counts[i].name != NULL; i++)
        fprintf(f, "%s %lu\n", counts[i].name, counts[i].count);
    pthread_mutex_unlock(&lock);
    fprintf(f, "total %lu\n", __atomic_load_n(&total_calls, __ATOMIC_RELAXED));
    fclose(f);
}

static void count_call(const char *name)
{
    __atomic_add_fetch(&total_calls, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        if (counts[i].name == NULL) {
            counts[i].name = name;
            counts[i].count = 1;
            break;
        }
        if (counts[i].name == name || strcmp(counts[i].name, name) == 0) {
            counts[i].count++;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------ parsing */

static void copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src);
}

static const char *rest_after(const char *line, int offset)
{
    const char *p = line + offset;
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static int parse_hex_uuid(const char *hex, unsigned char out[NVML_GPU_FABRIC_UUID_LEN])
{
    size_t n = 0;
    for (const char *p = hex; *p && n < 2 * NVML_GPU_FABRIC_UUID_LEN; p++) {
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
        if (n % 2 == 0)
            out[n / 2] = (unsigned char)(v << 4);
        else
            out[n / 2] |= (unsigned char)v;
        n++;
    }
    return n == 2 * NVML_GPU_FABRIC_UUID_LEN ? 0 : -1;
}

static int add_fail(struct fail *fails, int *n, const char *symbol, const char *err)
{
    if (*n >= MAX_FAILS)
        return -1;
    copy_str(fails[*n].symbol, sizeof(fails[*n].symbol), symbol);
    if (error_from_name(err, &fails[*n].code) != 0)
        return -1;
    (*n)++;
    return 0;
}

static struct gpu_instance *find_gi(struct gpu *g, unsigned id)
{
    for (int i = 0; i < g->n_gi; i++)
        if (g->gis[i].id == id)
            return &g->gis[i];
    return NULL;
}

/*
 * One record per line: "<key> <fields...>"; '#' starts a comment line.
 *
 *   fake-nvml 1                          format marker (optional)
 *   driver <version>                     nvmlSystemGetDriverVersion
 *   nvml_version <version>               nvmlSystemGetNVMLVersion
 *   cuda <int>                           nvmlSystemGetCudaDriverVersion
 *   init_error <ERROR>                   returned by nvmlInitWithFlags
 *   delay <symbol> <ms>                  sleep in every call of <symbol>
 *   fail <symbol> <ERROR>                before any "gpu": system-wide, else per GPU
 *   flaky <ERROR> <percent> [<seed>]     that share of all calls (but nvmlInit*, nvmlShutdown
 *                                        and the event-set calls) answer ERROR, at random
 *                                        (a xorshift generator seeded with <seed>, default 1)
 *   gpu                                  starts the next GPU (index = order)
 *   name <text to end of line>
 *   uuid <GPU-...>
 *   memory <bytes>
 *   cc <major> <minor>
 *   arch <NVML_DEVICE_ARCH_* value>
 *   brand <NVML_BRAND_* value>
 *   pci <bus id> <pciDeviceId hex> <pciSubSystemId hex>
 *   mig <supported 0|1> <current 0|1> <pending 0|1>
 *   compute_mode <0..3 | -1 for NOT_SUPPORTED>
 *   power <min mW> <max mW>              nvmlDeviceGetPowerManagementLimitConstraints
 *                                        (absent: NOT_SUPPORTED)
 *   nvlink <links> <active>              links 0: NOT_SUPPORTED
 *   fabric <state> <status ERROR> <clique id> <32 hex digits cluster uuid>
 *   fault <ERROR>                        every device call on this GPU fails
 *   mig_fault <ERROR>                    MIG enumeration calls fail
 *   max_mig <n>                          nvmlDeviceGetMaxMigDeviceCount
 *   minor <n>                            nvmlDeviceGetMinorNumber (absent: the GPU's index)
 *   events <mask>                        nvmlDeviceGetSupportedEventTypes (C number syntax;
 *                                        absent: 0, the GPU supports no event type)
 *   gip <index> <id> <slices> <instances> <sms> <ce> <dec> <enc> <jpeg> <ofa> <memMiB> <p2p> <name...>
 *   cip <gi profile id> <index> <id> <slices> <instances> <sms> <name...>
 *   gi <id> <profile id> <start> <size>
 *   ci <gi id> <ci id> <ci profile id> <slot> <start> <size> <MIG-uuid>
 *   end                                  optional
 */
static int parse_line(struct machine *m, char *line, const char **why)
{
    char key[32], a[SYM_LEN], b[SYM_LEN];
    int off = 0;
    struct gpu *g = m->n_gpu > 0 ? &m->gpus[m->n_gpu - 1] : NULL;

    if (sscanf(line, "%31s%n", key, &off) != 1)
        return 0;
    const char *rest = rest_after(line, off);

#define NEED_GPU()                                 \
    do {                                           \
        if (g == NULL) {                           \
            *why = "GPU record before any 'gpu'";  \
            return -1;                             \
        }                                          \
    } while (0)
#define SCAN(n, ...)                               \
    do {                                           \
        if (sscanf(rest, __VA_ARGS__) != (n)) {    \
            *why = "bad fields";                   \
            return -1;                             \
        }                                          \
    } while (0)

    if (strcmp(key, "fake-nvml") == 0 || strcmp(key, "end") == 0)
        return 0;
    if (strcmp(key, "driver") == 0) {
        copy_str(m->driver, sizeof(m->driver), rest);
    } else if (strcmp(key, "nvml_version") == 0) {
        copy_str(m->nvml_version, sizeof(m->nvml_version), rest);
    } else if (strcmp(key, "cuda") == 0) {
        SCAN(1, "%d", &m->cuda);
    } else if (strcmp(key, "init_error") == 0) {
        if (error_from_name(rest, &m->init_error) != 0) {
            *why = "unknown error name";
            return -1;
        }
    } else if (strcmp(key, "delay") == 0) {
        SCAN(2, "%79s %u", m->delay_symbol, &m->delay_ms);
    } else if (strcmp(key, "fail") == 0) {
        SCAN(2, "%79s %79s", a, b);
        if (add_fail(g ? g->fails : m->fails, g ? &g->n_fail : &m->n_fail, a, b) != 0) {
            *why = "bad fail record (unknown error or too many)";
            return -1;
        }
    } else if (strcmp(key, "flaky") == 0) {
        double percent = 0;
        unsigned long long seed = 1;
        int n = sscanf(rest, "%79s %lf %llu", a, &percent, &seed);
        if (n < 2 || error_from_name(a, &m->flaky) != 0 || percent < 0 || percent > 100) {
            *why = "bad flaky record (want an error name and a percent 0..100)";
            return -1;
        }
        m->flaky_ppm = (unsigned)(percent * 10000.0 + 0.5);
        m->flaky_seed = seed ? seed : 1;
    } else if (strcmp(key, "gpu") == 0) {
        if (m->n_gpu >= MAX_GPUS) {
            *why = "too many GPUs";
            return -1;
        }
        g = &m->gpus[m->n_gpu++];
        g->compute_mode = NVML_COMPUTEMODE_DEFAULT;
        g->arch = NVML_DEVICE_ARCH_UNKNOWN;
        g->max_mig = 7;
        g->minor = (unsigned)(m->n_gpu - 1);
        g->addressing = -1;
        g->fault = NVML_SUCCESS;
        g->mig_fault = NVML_SUCCESS;
        g->fabric_status = NVML_SUCCESS;
    } else if (strcmp(key, "name") == 0) {
        NEED_GPU();
        copy_str(g->name, sizeof(g->name), rest);
    } else if (strcmp(key, "uuid") == 0) {
        NEED_GPU();
        copy_str(g->uuid, sizeof(g->uuid), rest);
    } else if (strcmp(key, "memory") == 0) {
        NEED_GPU();
        SCAN(1, "%llu", &g->memory);
    } else if (strcmp(key, "cc") == 0) {
        NEED_GPU();
        SCAN(2, "%d %d", &g->cc_major, &g->cc_minor);
    } else if (strcmp(key, "arch") == 0) {
        NEED_GPU();
        SCAN(1, "%u", &g->arch);
    } else if (strcmp(key, "brand") == 0) {
        NEED_GPU();
        SCAN(1, "%u", &g->brand);
    } else if (strcmp(key, "pci") == 0) {
        NEED_GPU();
        SCAN(3, "%31s %x %x", g->bus_id, &g->pci_device_id, &g->pci_subsystem_id);
        unsigned fn = 0;
        if (sscanf(g->bus_id, "%x:%x:%x.%x", &g->domain, &g->bus, &g->device, &fn) != 4) {
            *why = "bad PCI bus id";
            return -1;
        }
    } else if (strcmp(key, "mig") == 0) {
        NEED_GPU();
        SCAN(3, "%d %u %u", &g->mig_supported, &g->mig_current, &g->mig_pending);
    } else if (strcmp(key, "compute_mode") == 0) {
        NEED_GPU();
        SCAN(1, "%d", &g->compute_mode);
    } else if (strcmp(key, "power") == 0) {
        NEED_GPU();
        SCAN(2, "%u %u", &g->power_min, &g->power_max);
        g->has_power = 1;
    } else if (strcmp(key, "nvlink") == 0) {
        NEED_GPU();
        SCAN(2, "%u %u", &g->nvlinks, &g->nvlinks_active);
    } else if (strcmp(key, "fabric") == 0) {
        NEED_GPU();
        SCAN(4, "%u %79s %u %79s", &g->fabric_state, a, &g->fabric_clique, b);
        if (error_from_name(a, &g->fabric_status) != 0 || parse_hex_uuid(b, g->cluster_uuid) != 0) {
            *why = "bad fabric record";
            return -1;
        }
        g->has_fabric = 1;
    } else if (strcmp(key, "fault") == 0 || strcmp(key, "mig_fault") == 0) {
        NEED_GPU();
        if (error_from_name(rest, key[0] == 'f' ? &g->fault : &g->mig_fault) != 0) {
            *why = "unknown error name";
            return -1;
        }
    } else if (strcmp(key, "max_mig") == 0) {
        NEED_GPU();
        SCAN(1, "%u", &g->max_mig);
        if (g->max_mig > MAX_MIG_SLOTS) {
            *why = "max_mig too large";
            return -1;
        }
    } else if (strcmp(key, "minor") == 0) {
        NEED_GPU();
        SCAN(1, "%u", &g->minor);
    } else if (strcmp(key, "events") == 0) {
        NEED_GPU();
        char *end = NULL;
        g->events = strtoull(rest, &end, 0);
        if (end == rest || (*end != '\0' && *end != ' ') || (g->events & ~nvmlEventTypeAll)) {
            *why = "bad event mask (a number within nvmlEventTypeAll)";
            return -1;
        }
    } else if (strcmp(key, "mig_silent") == 0) {
        NEED_GPU();
        g->mig_silent = 1;
    } else if (strcmp(key, "gip") == 0) {
        NEED_GPU();
        if (g->n_gip >= MAX_GIP) {
            *why = "too many GI profiles";
            return -1;
        }
        struct gi_profile *p = &g->gips[g->n_gip++];
        int n = 0;
        SCAN(12, "%u %u %u %u %u %u %u %u %u %u %llu %u%n", &p->index, &p->id, &p->slices,
             &p->instances, &p->sms, &p->ce, &p->dec, &p->enc, &p->jpeg, &p->ofa, &p->mem_mb,
             &p->p2p, &n);
        copy_str(p->name, sizeof(p->name), rest_after(rest, n));
    } else if (strcmp(key, "addressing") == 0) {
        NEED_GPU();
        SCAN(1, "%d", &g->addressing);
    } else if (strcmp(key, "gipp") == 0) {
        NEED_GPU();
        unsigned id, start, size;
        SCAN(3, "%u %u %u", &id, &start, &size);
        struct gi_profile *p = NULL;
        for (int i = 0; i < g->n_gip; i++)
            if (g->gips[i].id == id)
                p = &g->gips[i];
        if (p == NULL || p->n_place >= MAX_PLACEMENTS) {
            *why = "bad placement (unknown GI profile id, or too many)";
            return -1;
        }
        p->places[p->n_place++] = (nvmlGpuInstancePlacement_t){start, size};
    } else if (strcmp(key, "cip") == 0) {
        NEED_GPU();
        if (g->n_cip >= MAX_CIP) {
            *why = "too many CI profiles";
            return -1;
        }
        struct ci_profile *p = &g->cips[g->n_cip++];
        int n = 0;
        SCAN(6, "%u %u %u %u %u %u%n", &p->gi_profile_id, &p->index, &p->id, &p->slices,
             &p->instances, &p->sms, &n);
        copy_str(p->name, sizeof(p->name), rest_after(rest, n));
    } else if (strcmp(key, "gi") == 0) {
        NEED_GPU();
        if (g->n_gi >= MAX_GI) {
            *why = "too many GPU instances";
            return -1;
        }
        struct gpu_instance *gi = &g->gis[g->n_gi++];
        SCAN(4, "%u %u %u %u", &gi->id, &gi->profile_id, &gi->start, &gi->size);
        if (gi->id >= MAX_GI_ID) {
            *why = "GPU instance id too large";
            return -1;
        }
    } else if (strcmp(key, "ci") == 0) {
        NEED_GPU();
        unsigned gi_id;
        struct compute_instance ci = {0};
        SCAN(7, "%u %u %u %u %u %u %95s", &gi_id, &ci.id, &ci.profile_id, &ci.slot, &ci.start,
             &ci.size, ci.uuid);
        struct gpu_instance *gi = find_gi(g, gi_id);
        if (gi == NULL || gi->n_ci >= MAX_CI_ID || ci.id >= MAX_CI_ID ||
            ci.slot >= MAX_MIG_SLOTS) {
            *why = "bad compute instance (unknown GI, or id/slot out of range)";
            return -1;
        }
        gi->cis[gi->n_ci++] = ci;
    } else {
        *why = "unknown key";
        return -1;
    }
    return 0;
#undef NEED_GPU
#undef SCAN
}

static struct machine *load_profile(const char *path, struct stat *st)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "fake_nvml: cannot open profile %s: %s\n", path, strerror(errno));
        return NULL;
    }
    if (fstat(fileno(f), st) != 0) {
        fclose(f);
        return NULL;
    }
    struct machine *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        fclose(f);
        return NULL;
    }
    copy_str(m->driver, sizeof(m->driver), "550.54.15");
    m->cuda = 12040;
    m->init_error = NVML_SUCCESS;
    char line[1024];
    int lineno = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        const char *p = rest_after(line, 0);
        if (*p == '\0' || *p == '#')
            continue;
        const char *why = "";
        if (parse_line(m, line, &why) != 0) {
            fprintf(stderr, "fake_nvml: %s:%d: %s: %s\n", path, lineno, why, line);
            free(m);
            fclose(f);
            return NULL;
        }
    }
    fclose(f);
    if (m->nvml_version[0] == '\0')
        snprintf(m->nvml_version, sizeof(m->nvml_version), "%d.%.60s", m->cuda / 1000, m->driver);
    return m;
}

static void queue_mig_changes(const struct machine *old, const struct machine *m);

/* Must hold `lock`. Returns 0 on success. */
static int reload_locked(void)
{
    const char *path = getenv("FAKE_NVML_PROFILE");
    if (path == NULL || *path == '\0') {
        fprintf(stderr, "fake_nvml: FAKE_NVML_PROFILE is not set\n");
        return -1;
    }
    struct stat st;
    struct machine *m = load_profile(path, &st);
    if (m == NULL)
        return -1;
    struct machine *old = current;
    __atomic_store_n(&current, m, __ATOMIC_RELEASE);
    if (old != NULL)
        queue_mig_changes(old, m);
    /* Keep a few old machines alive: another thread may still be reading one. */
    free(retired[retired_next]);
    retired[retired_next] = old;
    retired_next = (retired_next + 1) % (sizeof(retired) / sizeof(retired[0]));
    copy_str(loaded_path, sizeof(loaded_path), path);
    loaded_stat = st;
    load_count++;
    return 0;
}

static void reload_if_changed(void)
{
    const char *path = getenv("FAKE_NVML_PROFILE");
    struct stat st;
    if (path == NULL || stat(path, &st) != 0)
        return;
    pthread_mutex_lock(&lock);
    if (strcmp(path, loaded_path) != 0 || st.st_size != loaded_stat.st_size ||
        st.st_ino != loaded_stat.st_ino || st.st_mtim.tv_sec != loaded_stat.st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != loaded_stat.st_mtim.tv_nsec)
        (void)reload_locked(); /* on a parse error the previous machine stays */
    pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------ call plumbing */

static nvmlReturn_t find_fail(const struct fail *fails, int n, const char *fn)
{
    for (int i = 0; i < n; i++)
        if (strcmp(fails[i].symbol, fn) == 0)
            return fails[i].code;
    return NVML_SUCCESS;
}

static unsigned long long flaky_state;

/* NVML_SUCCESS, or the machine's flaky error for a share of the calls (xorshift64*, seeded
 * by the first profile with a flaky record; a reload goes on with the same sequence). */
static nvmlReturn_t flaky_answer(const struct machine *m, const char *fn)
{
    if (m->flaky_ppm == 0 || strncmp(fn, "nvmlEventSet", 12) == 0)
        return NVML_SUCCESS;
    unsigned long long x = __atomic_load_n(&flaky_state, __ATOMIC_RELAXED), next;
    do {
        next = x ? x : (m->flaky_seed ? m->flaky_seed : 1);
        next ^= next >> 12;
        next ^= next << 25;
        next ^= next >> 27;
    } while (!__atomic_compare_exchange_n(&flaky_state, &x, next, 0, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return (next * 2685821657736338717ULL) % 1000000ULL < m->flaky_ppm ? m->flaky : NVML_SUCCESS;
}

/* Count the call, check init, apply the delay and system-wide injected failures. */
static nvmlReturn_t enter(const char *fn, const struct machine **out)
{
    count_call(fn);
    const struct machine *m = machine_now();
    if (__atomic_load_n(&refcount, __ATOMIC_ACQUIRE) <= 0 || m == NULL)
        return NVML_ERROR_UNINITIALIZED;
    if (m->delay_ms > 0 && strcmp(m->delay_symbol, fn) == 0) {
        struct timespec ts = {m->delay_ms / 1000, (long)(m->delay_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    *out = m;
    nvmlReturn_t r = find_fail(m->fails, m->n_fail, fn);
    return r != NVML_SUCCESS ? r : flaky_answer(m, fn);
}

/* Resolve a device handle (full GPU, or MIG device when allowed) for `fn`. */
static nvmlReturn_t device_of(const struct machine *m, const char *fn, const void *device,
                              int allow_mig, const struct gpu **gpu, const struct handle **out)
{
    const struct handle *h = as_handle(device);
    if (h == NULL || (h->kind != K_GPU && !(allow_mig && h->kind == K_MIG)))
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((int)h->gpu >= m->n_gpu)
        return NVML_ERROR_GPU_IS_LOST; /* the GPU vanished after a profile switch */
    const struct gpu *g = &m->gpus[h->gpu];
    if (g->fault != NVML_SUCCESS)
        return g->fault;
    nvmlReturn_t r = find_fail(g->fails, g->n_fail, fn);
    if (r != NVML_SUCCESS)
        return r;
    *gpu = g;
    if (out)
        *out = h;
    return NVML_SUCCESS;
}

#define ENTER()                                   \
    const struct machine *m = NULL;               \
    do {                                          \
        nvmlReturn_t r_ = enter(__func__, &m);    \
        if (r_ != NVML_SUCCESS)                   \
            return r_;                            \
    } while (0)

#define DEVICE(dev, allow_mig)                                            \
    const struct gpu *g = NULL;                                           \
    const struct handle *h = NULL;                                        \
    do {                                                                  \
        nvmlReturn_t r_ = device_of(m, __func__, (dev), (allow_mig), &g, &h); \
        if (r_ != NVML_SUCCESS)                                           \
            return r_;                                                    \
    } while (0)

#define NOT_NULL(p)                                \
    do {                                           \
        if ((p) == NULL)                           \
            return NVML_ERROR_INVALID_ARGUMENT;    \
    } while (0)

static nvmlReturn_t put_str(char *dst, unsigned int length, const char *src)
{
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

static const struct gi_profile *gip_by_id(const struct gpu *g, unsigned id)
{
    for (int i = 0; i < g->n_gip; i++)
        if (g->gips[i].id == id)
            return &g->gips[i];
    return NULL;
}

static const struct ci_profile *cip_by_id(const struct gpu *g, unsigned gi_profile_id, unsigned id)
{
    for (int i = 0; i < g->n_cip; i++)
        if (g->cips[i].gi_profile_id == gi_profile_id && g->cips[i].id == id)
            return &g->cips[i];
    return NULL;
}

static const struct gpu_instance *gi_by_id(const struct gpu *g, unsigned id)
{
    for (int i = 0; i < g->n_gi; i++)
        if (g->gis[i].id == id)
            return &g->gis[i];
    return NULL;
}

static const struct compute_instance *ci_by_id(const struct gpu_instance *gi, unsigned id)
{
    for (int i = 0; i < gi->n_ci; i++)
        if (gi->cis[i].id == id)
            return &gi->cis[i];
    return NULL;
}

/* The MIG device in `slot`, if any. */
static int mig_at(const struct gpu *g, unsigned slot, const struct gpu_instance **gi,
                  const struct compute_instance **ci)
{
    for (int i = 0; i < g->n_gi; i++)
        for (int j = 0; j < g->gis[i].n_ci; j++)
            if (g->gis[i].cis[j].slot == slot) {
                *gi = &g->gis[i];
                *ci = &g->gis[i].cis[j];
                return 1;
            }
    return 0;
}

/* For a MIG handle: its GI and CI now, or NOT_FOUND if the slot emptied. */
static nvmlReturn_t mig_parts(const struct gpu *g, const struct handle *h,
                              const struct gpu_instance **gi, const struct compute_instance **ci)
{
    if (!g->mig_current || !mig_at(g, h->slot, gi, ci))
        return NVML_ERROR_NOT_FOUND;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ test hooks */

unsigned long fake_nvml_init_count(void) { return init_count; }
unsigned long fake_nvml_load_count(void) { return load_count; }
int fake_nvml_refcount(void) { return refcount; }

unsigned long fake_nvml_call_count(const char *name)
{
    unsigned long n = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]) && counts[i].name; i++)
        if (name == NULL || strcmp(counts[i].name, name) == 0)
            n += counts[i].count;
    pthread_mutex_unlock(&lock);
    return n;
}

void fake_nvml_reset_counts(void)
{
    pthread_mutex_lock(&lock);
    memset(counts, 0, sizeof(counts));
    init_count = 0;
    load_count = 0;
    pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------ init */

const char *nvmlErrorString(nvmlReturn_t result)
{
    for (size_t i = 0; i < N_ERRORS; i++)
        if (ERRORS[i].code == result)
            return ERRORS[i].text;
    return "Unknown Error";
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    count_call(__func__);
    pthread_mutex_lock(&lock);
    nvmlReturn_t r = NVML_SUCCESS;
    if (reload_locked() != 0)
        r = NVML_ERROR_UNKNOWN;
    else if (current->init_error != NVML_SUCCESS)
        r = current->init_error;
    else {
        __atomic_add_fetch(&refcount, 1, __ATOMIC_ACQ_REL);
        init_count++;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void)
{
    count_call(__func__);
    pthread_mutex_lock(&lock);
    nvmlReturn_t r = NVML_SUCCESS;
    if (refcount <= 0)
        r = NVML_ERROR_UNINITIALIZED;
    else
        __atomic_sub_fetch(&refcount, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&lock);
    return r;
}

/* ------------------------------------------------------------------ system */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    ENTER();
    NOT_NULL(version);
    return put_str(version, length, m->driver);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    ENTER();
    NOT_NULL(version);
    return put_str(version, length, m->nvml_version);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    ENTER();
    NOT_NULL(cudaDriverVersion);
    *cudaDriverVersion = m->cuda;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    ENTER();
    NOT_NULL(cudaDriverVersion);
    *cudaDriverVersion = m->cuda;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ enumeration */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (__atomic_load_n(&refcount, __ATOMIC_ACQUIRE) > 0)
        reload_if_changed();
    ENTER();
    log_calls();
    NOT_NULL(deviceCount);
    *deviceCount = (unsigned)m->n_gpu;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    ENTER();
    NOT_NULL(device);
    if (index >= (unsigned)m->n_gpu)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEVICE(&gpu_handles[index], 0);
    (void)g;
    (void)h;
    *device = (nvmlDevice_t)&gpu_handles[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    ENTER();
    NOT_NULL(uuid);
    NOT_NULL(device);
    for (int i = 0; i < m->n_gpu; i++) {
        if (strcmp(m->gpus[i].uuid, uuid) == 0) {
            *device = (nvmlDevice_t)&gpu_handles[i];
            return NVML_SUCCESS;
        }
        for (int j = 0; j < m->gpus[i].n_gi; j++)
            for (int k = 0; k < m->gpus[i].gis[j].n_ci; k++)
                if (strcmp(m->gpus[i].gis[j].cis[k].uuid, uuid) == 0) {
                    *device = (nvmlDevice_t)&mig_handles[i][m->gpus[i].gis[j].cis[k].slot];
                    return NVML_SUCCESS;
                }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    ENTER();
    NOT_NULL(pciBusId);
    NOT_NULL(device);
    for (int i = 0; i < m->n_gpu; i++) {
        if (strcasecmp(m->gpus[i].bus_id, pciBusId) == 0) {
            *device = (nvmlDevice_t)&gpu_handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(index);
    (void)g;
    *index = h->gpu;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(minorNumber);
    (void)h;
    *minorNumber = g->minor;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ device queries */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    ENTER();
    DEVICE(device, 1);
    NOT_NULL(name);
    if (h->kind == K_MIG) {
        const struct gpu_instance *gi;
        const struct compute_instance *ci;
        nvmlReturn_t r = mig_parts(g, h, &gi, &ci);
        if (r != NVML_SUCCESS)
            return r;
        const struct gi_profile *p = gip_by_id(g, gi->profile_id);
        char buf[2 * STR_LEN + 2];
        snprintf(buf, sizeof(buf), "%s %s", g->name, p ? p->name : "MIG");
        return put_str(name, length, buf);
    }
    return put_str(name, length, g->name);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    ENTER();
    DEVICE(device, 1);
    NOT_NULL(uuid);
    if (h->kind == K_MIG) {
        const struct gpu_instance *gi;
        const struct compute_instance *ci;
        nvmlReturn_t r = mig_parts(g, h, &gi, &ci);
        if (r != NVML_SUCCESS)
            return r;
        return put_str(uuid, length, ci->uuid);
    }
    return put_str(uuid, length, g->uuid);
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    ENTER();
    DEVICE(device, 1);
    NOT_NULL(type);
    *type = (nvmlBrandType_t)g->brand;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    ENTER();
    DEVICE(device, 1);
    NOT_NULL(arch);
    *arch = g->arch;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    ENTER();
    DEVICE(device, 1);
    NOT_NULL(major);
    NOT_NULL(minor);
    *major = g->cc_major;
    *minor = g->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    ENTER();
    DEVICE(device, 1);
    NOT_NULL(memory);
    unsigned long long total = g->memory;
    if (h->kind == K_MIG) {
        const struct gpu_instance *gi;
        const struct compute_instance *ci;
        nvmlReturn_t r = mig_parts(g, h, &gi, &ci);
        if (r != NVML_SUCCESS)
            return r;
        const struct gi_profile *p = gip_by_id(g, gi->profile_id);
        total = p ? p->mem_mb * 1048576ULL : 0;
    }
    memory->total = total;
    memory->used = 0;
    memory->free = total;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(pci);
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
             g->domain & 0xffffu, g->bus, g->device);
    snprintf(pci->busId, sizeof(pci->busId), "%s", g->bus_id);
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->device;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = g->pci_subsystem_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(mode);
    if (g->compute_mode < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *mode = (nvmlComputeMode_t)g->compute_mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                          unsigned int *minLimit,
                                                          unsigned int *maxLimit)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(minLimit);
    NOT_NULL(maxLimit);
    if (!g->has_power)
        return NVML_ERROR_NOT_SUPPORTED;
    *minLimit = g->power_min;
    *maxLimit = g->power_max;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t *isActive)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(isActive);
    if (g->nvlinks == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g->nvlinks || link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = link < g->nvlinks_active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OLD_DRIVER
static void fill_fabric(const struct gpu *g, unsigned char uuid[NVML_GPU_FABRIC_UUID_LEN],
                        nvmlReturn_t *status, unsigned int *clique, nvmlGpuFabricState_t *state)
{
    memcpy(uuid, g->cluster_uuid, NVML_GPU_FABRIC_UUID_LEN);
    *status = g->fabric_status;
    *clique = g->fabric_clique;
    *state = (nvmlGpuFabricState_t)g->fabric_state;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(gpuFabricInfo);
    if (!g->has_fabric)
        return NVML_ERROR_NOT_SUPPORTED;
    fill_fabric(g, gpuFabricInfo->clusterUuid, &gpuFabricInfo->status, &gpuFabricInfo->cliqueId,
                &gpuFabricInfo->state);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(gpuFabricInfo);
    if (!g->has_fabric)
        return NVML_ERROR_NOT_SUPPORTED;
    if (gpuFabricInfo->version == nvmlGpuFabricInfo_v2) {
        nvmlGpuFabricInfo_v2_t *v2 = (nvmlGpuFabricInfo_v2_t *)gpuFabricInfo;
        fill_fabric(g, v2->clusterUuid, &v2->status, &v2->cliqueId, &v2->state);
        v2->healthMask = 0;
    } else if (gpuFabricInfo->version == nvmlGpuFabricInfo_v3) {
        nvmlGpuFabricInfo_v3_t *v3 = gpuFabricInfo;
        fill_fabric(g, v3->clusterUuid, &v3->status, &v3->cliqueId, &v3->state);
        v3->healthMask = 0;
        v3->healthSummary = NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY;
    } else {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    return NVML_SUCCESS;
}
#endif

/* ------------------------------------------------------------------ MIG */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(currentMode);
    NOT_NULL(pendingMode);
    if (!g->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = g->mig_current ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = g->mig_pending ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(count);
    if (!g->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = g->max_mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(migDevice);
    if (!g->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    if (g->mig_fault != NVML_SUCCESS)
        return g->mig_fault;
    if (index >= g->max_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct gpu_instance *gi;
    const struct compute_instance *ci;
    if (!g->mig_current || !mig_at(g, index, &gi, &ci))
        return NVML_ERROR_NOT_FOUND;
    *migDevice = (nvmlDevice_t)&mig_handles[h->gpu][index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    ENTER();
    DEVICE(device, 1);
    NOT_NULL(isMigDevice);
    (void)g;
    *isMigDevice = h->kind == K_MIG;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device)
{
    ENTER();
    DEVICE(migDevice, 1);
    NOT_NULL(device);
    (void)g;
    if (h->kind != K_MIG)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&gpu_handles[h->gpu];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    ENTER();
    DEVICE(device, 1);
    NOT_NULL(id);
    if (h->kind != K_MIG)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct gpu_instance *gi;
    const struct compute_instance *ci;
    nvmlReturn_t r = mig_parts(g, h, &gi, &ci);
    if (r != NVML_SUCCESS)
        return r;
    *id = gi->id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    ENTER();
    DEVICE(device, 1);
    NOT_NULL(id);
    if (h->kind != K_MIG)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct gpu_instance *gi;
    const struct compute_instance *ci;
    nvmlReturn_t r = mig_parts(g, h, &gi, &ci);
    if (r != NVML_SUCCESS)
        return r;
    *id = ci->id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    ENTER();
    DEVICE(device, 1);
    NOT_NULL(attributes);
    /* NVML documents this call for MIG device handles only. */
    if (h->kind != K_MIG)
        return NVML_ERROR_NOT_SUPPORTED;
    const struct gpu_instance *gi;
    const struct compute_instance *ci;
    nvmlReturn_t r = mig_parts(g, h, &gi, &ci);
    if (r != NVML_SUCCESS)
        return r;
    const struct gi_profile *gp = gip_by_id(g, gi->profile_id);
    const struct ci_profile *cp = cip_by_id(g, gi->profile_id, ci->profile_id);
    if (gp == NULL || cp == NULL)
        return NVML_ERROR_UNKNOWN; /* a profile file without the tables it refers to */
    memset(attributes, 0, sizeof(*attributes));
    attributes->multiprocessorCount = cp->sms;
    attributes->sharedCopyEngineCount = gp->ce;
    attributes->sharedDecoderCount = gp->dec;
    attributes->sharedEncoderCount = gp->enc;
    attributes->sharedJpegCount = gp->jpeg;
    attributes->sharedOfaCount = gp->ofa;
    attributes->gpuInstanceSliceCount = gp->slices;
    attributes->computeInstanceSliceCount = cp->slices;
    attributes->memorySizeMB = gp->mem_mb;
    return NVML_SUCCESS;
}

/* GPU-instance handle -> GPU and GI, checking the MIG permission fault. */
static nvmlReturn_t gi_of(const struct machine *m, const char *fn, nvmlGpuInstance_t gpuInstance,
                          const struct gpu **gpu, const struct gpu_instance **gi,
                          const struct handle **out)
{
    const struct handle *h = as_handle(gpuInstance);
    if (h == NULL || h->kind != K_GI || (int)h->gpu >= m->n_gpu)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct gpu *g = &m->gpus[h->gpu];
    if (g->fault != NVML_SUCCESS)
        return g->fault;
    nvmlReturn_t r = find_fail(g->fails, g->n_fail, fn);
    if (r != NVML_SUCCESS)
        return r;
    const struct gpu_instance *found = gi_by_id(g, h->gi_id);
    if (found == NULL || !g->mig_current)
        return NVML_ERROR_INVALID_ARGUMENT; /* the GI was destroyed */
    *gpu = g;
    *gi = found;
    *out = h;
    return NVML_SUCCESS;
}

#define GPU_INSTANCE(gih)                                                   \
    const struct gpu *g = NULL;                                             \
    const struct gpu_instance *gi = NULL;                                   \
    const struct handle *h = NULL;                                          \
    do {                                                                    \
        nvmlReturn_t r_ = gi_of(m, __func__, (gih), &g, &gi, &h);           \
        if (r_ != NVML_SUCCESS)                                             \
            return r_;                                                      \
    } while (0)

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t *gpuInstance)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(gpuInstance);
    if (!g->mig_supported || !g->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    if (g->mig_fault != NVML_SUCCESS)
        return g->mig_fault;
    if (id >= MAX_GI_ID || gi_by_id(g, id) == NULL)
        return NVML_ERROR_NOT_FOUND;
    *gpuInstance = (nvmlGpuInstance_t)&gi_handles[h->gpu][id];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    ENTER();
    GPU_INSTANCE(gpuInstance);
    NOT_NULL(info);
    (void)g;
    memset(info, 0, sizeof(*info));
    info->device = (nvmlDevice_t)&gpu_handles[h->gpu];
    info->id = gi->id;
    info->profileId = gi->profile_id;
    info->placement.start = gi->start;
    info->placement.size = gi->size;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance)
{
    ENTER();
    GPU_INSTANCE(gpuInstance);
    NOT_NULL(computeInstance);
    if (g->mig_fault != NVML_SUCCESS)
        return g->mig_fault;
    if (id >= MAX_CI_ID || ci_by_id(gi, id) == NULL)
        return NVML_ERROR_NOT_FOUND;
    *computeInstance = (nvmlComputeInstance_t)&ci_handles[h->gpu][gi->id][id];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                           nvmlComputeInstanceInfo_t *info)
{
    ENTER();
    NOT_NULL(info);
    const struct handle *h = as_handle(computeInstance);
    if (h == NULL || h->kind != K_CI || (int)h->gpu >= m->n_gpu)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct gpu *g = &m->gpus[h->gpu];
    if (g->fault != NVML_SUCCESS)
        return g->fault;
    nvmlReturn_t r = find_fail(g->fails, g->n_fail, __func__);
    if (r != NVML_SUCCESS)
        return r;
    const struct gpu_instance *gi = gi_by_id(g, h->gi_id);
    const struct compute_instance *ci = gi ? ci_by_id(gi, h->ci_id) : NULL;
    if (ci == NULL || !g->mig_current)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof(*info));
    info->device = (nvmlDevice_t)&gpu_handles[h->gpu];
    info->gpuInstance = (nvmlGpuInstance_t)&gi_handles[h->gpu][h->gi_id];
    info->id = ci->id;
    info->profileId = ci->profile_id;
    info->placement.start = ci->start;
    info->placement.size = ci->size;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAddressingMode(nvmlDevice_t device, nvmlDeviceAddressingMode_t *mode)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(mode);
    if (mode->version != nvmlDeviceAddressingMode_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (g->addressing < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    mode->value = (unsigned)g->addressing;
    return NVML_SUCCESS;
}

/* Every placement a GI profile (by profile *id*) may take, MIG mode on or off. */
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device,
                                                           unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t *placements,
                                                           unsigned int *count)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(count);
    if (!g->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    const struct gi_profile *p = gip_by_id(g, profileId);
    if (p == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (placements == NULL) {
        *count = p->n_place;
        return NVML_SUCCESS;
    }
    if (*count < p->n_place) {
        *count = p->n_place;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(placements, p->places, p->n_place * sizeof(*placements));
    *count = p->n_place;
    return NVML_SUCCESS;
}

/* GI profile by NVML profile *index* (NVML_GPU_INSTANCE_PROFILE_*). */
static nvmlReturn_t gip_by_index(const struct gpu *g, unsigned profile,
                                 const struct gi_profile **out)
{
    if (!g->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < g->n_gip; i++)
        if (g->gips[i].index == profile) {
            *out = &g->gips[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(info);
    const struct gi_profile *p = NULL;
    nvmlReturn_t r = gip_by_index(g, profile, &p);
    if (r != NVML_SUCCESS)
        return r;
    info->id = p->id;
    info->isP2pSupported = p->p2p;
    info->sliceCount = p->slices;
    info->instanceCount = p->instances;
    info->multiprocessorCount = p->sms;
    info->copyEngineCount = p->ce;
    info->decoderCount = p->dec;
    info->encoderCount = p->enc;
    info->jpegCount = p->jpeg;
    info->ofaCount = p->ofa;
    info->memorySizeMB = p->mem_mb;
    return NVML_SUCCESS;
}

/* CI profile by NVML profile *index* within the GI's profile. */
static nvmlReturn_t cip_by_index(const struct gpu *g, const struct gpu_instance *gi,
                                 unsigned profile, unsigned engProfile,
                                 const struct ci_profile **out)
{
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
        engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < g->n_cip; i++)
        if (g->cips[i].gi_profile_id == gi->profile_id && g->cips[i].index == profile) {
            *out = &g->cips[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance,
                                                          unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info)
{
    ENTER();
    GPU_INSTANCE(gpuInstance);
    NOT_NULL(info);
    (void)h;
    const struct ci_profile *p = NULL;
    nvmlReturn_t r = cip_by_index(g, gi, profile, engProfile, &p);
    if (r != NVML_SUCCESS)
        return r;
    const struct gi_profile *gp = gip_by_id(g, gi->profile_id);
    memset(info, 0, sizeof(*info));
    info->id = p->id;
    info->sliceCount = p->slices;
    info->instanceCount = p->instances;
    info->multiprocessorCount = p->sms;
    if (gp) {
        info->sharedCopyEngineCount = gp->ce;
        info->sharedDecoderCount = gp->dec;
        info->sharedEncoderCount = gp->enc;
        info->sharedJpegCount = gp->jpeg;
        info->sharedOfaCount = gp->ofa;
    }
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(info);
    const struct gi_profile *p = NULL;
    nvmlReturn_t r = gip_by_index(g, profile, &p);
    if (r != NVML_SUCCESS)
        return r;
    if (info->version == nvmlGpuInstanceProfileInfo_v2) {
        info->id = p->id;
        info->isP2pSupported = p->p2p;
        info->sliceCount = p->slices;
        info->instanceCount = p->instances;
        info->multiprocessorCount = p->sms;
        info->copyEngineCount = p->ce;
        info->decoderCount = p->dec;
        info->encoderCount = p->enc;
        info->jpegCount = p->jpeg;
        info->ofaCount = p->ofa;
        info->memorySizeMB = p->mem_mb;
        copy_str(info->name, sizeof(info->name), p->name);
    } else if (info->version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)info;
        v3->id = p->id;
        v3->sliceCount = p->slices;
        v3->instanceCount = p->instances;
        v3->multiprocessorCount = p->sms;
        v3->copyEngineCount = p->ce;
        v3->decoderCount = p->dec;
        v3->encoderCount = p->enc;
        v3->jpegCount = p->jpeg;
        v3->ofaCount = p->ofa;
        v3->memorySizeMB = p->mem_mb;
        copy_str(v3->name, sizeof(v3->name), p->name);
        v3->capabilities = 0;
    } else {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance,
                                                           unsigned int profile,
                                                           unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info)
{
    ENTER();
    GPU_INSTANCE(gpuInstance);
    NOT_NULL(info);
    (void)h;
    const struct ci_profile *p = NULL;
    nvmlReturn_t r = cip_by_index(g, gi, profile, engProfile, &p);
    if (r != NVML_SUCCESS)
        return r;
    const struct gi_profile *gp = gip_by_id(g, gi->profile_id);
    if (info->version == nvmlComputeInstanceProfileInfo_v2) {
        info->id = p->id;
        info->sliceCount = p->slices;
        info->instanceCount = p->instances;
        info->multiprocessorCount = p->sms;
        info->sharedCopyEngineCount = gp ? gp->ce : 0;
        info->sharedDecoderCount = gp ? gp->dec : 0;
        info->sharedEncoderCount = gp ? gp->enc : 0;
        info->sharedJpegCount = gp ? gp->jpeg : 0;
        info->sharedOfaCount = gp ? gp->ofa : 0;
        copy_str(info->name, sizeof(info->name), p->name);
    } else if (info->version == nvmlComputeInstanceProfileInfo_v3) {
        nvmlComputeInstanceProfileInfo_v3_t *v3 = (nvmlComputeInstanceProfileInfo_v3_t *)info;
        v3->id = p->id;
        v3->sliceCount = p->slices;
        v3->instanceCount = p->instances;
        v3->multiprocessorCount = p->sms;
        v3->sharedCopyEngineCount = gp ? gp->ce : 0;
        v3->sharedDecoderCount = gp ? gp->dec : 0;
        v3->sharedEncoderCount = gp ? gp->enc : 0;
        v3->sharedJpegCount = gp ? gp->jpeg : 0;
        v3->sharedOfaCount = gp ? gp->ofa : 0;
        copy_str(v3->name, sizeof(v3->name), p->name);
        v3->capabilities = 0;
    } else {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    return NVML_SUCCESS;
}
#endif

/* ------------------------------------------------------------------ events
 *
 * Event sets as NVML has them on Linux (nvmlEventSetCreate, nvmlDeviceGetSupportedEventTypes,
 * nvmlDeviceRegisterEvents, nvmlEventSetWait_v2, nvmlEventSetFree), fed by the test through
 * a FIFO named by $FAKE_NVML_EVENTS (tests/fakes/fakenvml.py: EventPipe), one event a line:
 *
 *   <gpu index> <event type bit, C number syntax> [<eventData> [<gpuInstanceId> <computeInstanceId>]]
 *
 * eventData defaults to 0 (NVML: the Xid for nvmlEventTypeXidCriticalError, else 0), the
 * instance ids to 0xFFFFFFFF (NVML: not attributable to a MIG instance).
 *
 * - The FIFO is opened O_RDWR|O_NONBLOCK by nvmlEventSetCreate (so a writer closing it is no
 *   EOF), once per FIFO however many sets use it (a "channel"); what it held before its
 *   first set opened it is discarded, as NVML records no event from before a registration.
 *   Without $FAKE_NVML_EVENTS a set simply never sees an event.
 * - nvmlEventSetWait_v2 reads the lines waiting in the FIFO and hands each one to every set
 *   on that FIFO registered for that GPU and type (fan-out, as each NVML set gets its own
 *   copy); a line nobody registered for is discarded. It returns at once when its set has an
 *   event queued, else blocks in poll() on the FIFO (and on the set's wake pipe, written when
 *   another thread's Wait queued an event for it) until an event or the timeout: no CPU while
 *   idle, and neither `lock` nor `events_lock` is held while blocked. A signal interrupting
 *   the poll returns NVML_ERROR_TIMEOUT, as NVML documents.
 * - Registrations are matched when a Wait reads a line, not when the test wrote it: a line
 *   written before nvmlDeviceRegisterEvents but read after it is delivered.
 * - Limitations: sets are not per-process isolated from each other beyond the fan-out (two
 *   processes reading one FIFO share its lines: give each process its own FIFO); freeing a
 *   set while another thread waits on it is undefined in NVML, so the fake refuses it with
 *   NVML_ERROR_IN_USE and a line on stderr rather than crash; nvmlEventSetWait (v1) is not
 *   provided (pynvml's nvmlEventSetWait calls nvmlEventSetWait_v2).
 */

#define EVENT_QUEUE 256
#define CHANNEL_BUF 4096
#define SET_MAGIC 0x45564e54u

struct channel {
    dev_t dev;
    ino_t ino;
    int fd;
    int users;
    size_t len;
    char buf[CHANNEL_BUF];
    struct channel *next;
};

struct event_set {
    unsigned magic;
    unsigned long long mask[MAX_GPUS]; /* registered types per GPU index */
    struct channel *channel;           /* NULL: no FIFO was named, never an event */
    int wake[2];                       /* self-pipe: events were queued by another Wait */
    int waiters;
    unsigned head, count;
    nvmlEventData_t queue[EVENT_QUEUE];
    struct event_set *next;
};

static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;
static struct event_set *event_sets;
static struct channel *channels;

unsigned long fake_nvml_event_set_count(void)
{
    unsigned long n = 0;
    pthread_mutex_lock(&events_lock);
    for (struct event_set *s = event_sets; s != NULL; s = s->next)
        n++;
    pthread_mutex_unlock(&events_lock);
    return n;
}

/* Must hold events_lock. */
static struct event_set *find_set_locked(const void *p)
{
    for (struct event_set *s = event_sets; s != NULL; s = s->next)
        if ((const void *)s == p && s->magic == SET_MAGIC)
            return s;
    return NULL;
}

static int is_one_event_type(unsigned long long type)
{
    return type != 0 && (type & (type - 1)) == 0 && (type & ~nvmlEventTypeAll) == 0;
}

/* Must hold events_lock. Queue one event for every set on `ch` registered for it. */
static void dispatch_locked(struct channel *ch, const char *line)
{
    unsigned gpu = 0, gi = 0xFFFFFFFFu, ci = 0xFFFFFFFFu;
    unsigned long long data = 0;
    char type_text[64];
    int n = sscanf(line, "%u %63s %llu %u %u", &gpu, type_text, &data, &gi, &ci);
    char *end = NULL;
    unsigned long long type = n >= 2 ? strtoull(type_text, &end, 0) : 0;
    if (n < 2 || n == 4 || *end != '\0' || !is_one_event_type(type) || gpu >= MAX_GPUS) {
        fprintf(stderr, "fake_nvml: bad event line (want '<gpu> <type bit> [data [gi ci]]'): %s\n",
                line);
        return;
    }
    const struct machine *m = machine_now();
    if (m == NULL || (int)gpu >= m->n_gpu)
        return; /* no such GPU (any more): nobody can have registered it */
    for (struct event_set *s = event_sets; s != NULL; s = s->next) {
        if (s->channel != ch || !(s->mask[gpu] & type))
            continue;
        if (s->count == EVENT_QUEUE) {
            fprintf(stderr, "fake_nvml: event queue of a set full, event dropped: %s\n", line);
            continue;
        }
        nvmlEventData_t *e = &s->queue[(s->head + s->count++) % EVENT_QUEUE];
        e->device = (nvmlDevice_t)&gpu_handles[gpu];
        e->eventType = type;
        e->eventData = data;
        e->gpuInstanceId = gi;
        e->computeInstanceId = ci;
        ssize_t w = write(s->wake[1], "", 1); /* full pipe: already woken */
        (void)w;
    }
}

/* Must hold events_lock. Queue one event for every set registered for it. */
static void queue_locked(unsigned gpu, unsigned long long type)
{
    for (struct event_set *s = event_sets; s != NULL; s = s->next) {
        if (!(s->mask[gpu] & type) || s->count == EVENT_QUEUE)
            continue;
        nvmlEventData_t *e = &s->queue[(s->head + s->count++) % EVENT_QUEUE];
        *e = (nvmlEventData_t){.device = (nvmlDevice_t)&gpu_handles[gpu], .eventType = type,
                               .gpuInstanceId = 0xFFFFFFFFu, .computeInstanceId = 0xFFFFFFFFu};
        ssize_t w = write(s->wake[1], "", 1); /* full pipe: already woken */
        (void)w;
    }
}

/* A profile reload that changed a GPU's GPU or compute instances sends
 * nvmlEventMigConfigChange for it, as the driver does when instances are created or
 * destroyed (each set registered for it gets one, whatever FIFO it reads) -- unless the new
 * profile marks the GPU `mig_silent`: a change the driver does not report as an event (a
 * tool it does not see, a driver whose delivery is unreliable). */
static void queue_mig_changes(const struct machine *old, const struct machine *m)
{
    pthread_mutex_lock(&events_lock);
    for (int i = 0; i < m->n_gpu && i < old->n_gpu; i++) {
        const struct gpu *a = &old->gpus[i], *b = &m->gpus[i];
        if (b->mig_silent)
            continue;
        if (a->n_gi != b->n_gi || memcmp(a->gis, b->gis, sizeof(a->gis[0]) * (size_t)a->n_gi) != 0)
            queue_locked((unsigned)i, nvmlEventMigConfigChange);
    }
    pthread_mutex_unlock(&events_lock);
}

/* Must hold events_lock. Read what the FIFO holds; dispatch each complete line. */
static void drain_locked(struct channel *ch)
{
    for (;;) {
        if (ch->len == sizeof(ch->buf)) {
            fprintf(stderr, "fake_nvml: event line longer than %d bytes, discarded\n", CHANNEL_BUF);
            ch->len = 0;
        }
        ssize_t got = read(ch->fd, ch->buf + ch->len, sizeof(ch->buf) - ch->len);
        if (got <= 0)
            break; /* EAGAIN: empty (0 cannot happen: the fd is also a writer) */
        ch->len += (size_t)got;
        char *start = ch->buf, *nl;
        while ((nl = memchr(start, '\n', ch->len - (size_t)(start - ch->buf))) != NULL) {
            *nl = '\0';
            if (nl > start)
                dispatch_locked(ch, start);
            start = nl + 1;
        }
        ch->len -= (size_t)(start - ch->buf);
        memmove(ch->buf, start, ch->len);
    }
}

/* Must hold events_lock. The channel of the FIFO at `path`, opened if need be. */
static nvmlReturn_t channel_open_locked(const char *path, struct channel **out)
{
    int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
        fprintf(stderr, "fake_nvml: FAKE_NVML_EVENTS=%s is not a FIFO: %s\n", path,
                fd < 0 ? strerror(errno) : "wrong file type");
        if (fd >= 0)
            close(fd);
        return NVML_ERROR_UNKNOWN;
    }
    for (struct channel *ch = channels; ch != NULL; ch = ch->next) {
        if (ch->dev == st.st_dev && ch->ino == st.st_ino) {
            close(fd);
            ch->users++;
            *out = ch;
            return NVML_SUCCESS;
        }
    }
    struct channel *ch = calloc(1, sizeof(*ch));
    if (ch == NULL) {
        close(fd);
        return NVML_ERROR_MEMORY;
    }
    *ch = (struct channel){.dev = st.st_dev, .ino = st.st_ino, .fd = fd, .users = 1};
    char discard[4096];
    while (read(fd, discard, sizeof(discard)) > 0) {
        /* events from before any set existed are not recorded */
    }
    ch->next = channels;
    channels = ch;
    *out = ch;
    return NVML_SUCCESS;
}

/* Must hold events_lock. */
static void channel_release_locked(struct channel *ch)
{
    if (ch == NULL || --ch->users > 0)
        return;
    for (struct channel **p = &channels; *p != NULL; p = &(*p)->next) {
        if (*p == ch) {
            *p = ch->next;
            break;
        }
    }
    close(ch->fd);
    free(ch);
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    ENTER();
    (void)m;
    NOT_NULL(set);
    struct event_set *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(s);
        return NVML_ERROR_UNKNOWN;
    }
    const char *path = getenv("FAKE_NVML_EVENTS");
    pthread_mutex_lock(&events_lock);
    nvmlReturn_t r = NVML_SUCCESS;
    if (path != NULL && *path != '\0')
        r = channel_open_locked(path, &s->channel);
    if (r == NVML_SUCCESS) {
        s->magic = SET_MAGIC;
        s->next = event_sets;
        event_sets = s;
    }
    pthread_mutex_unlock(&events_lock);
    if (r != NVML_SUCCESS) {
        close(s->wake[0]);
        close(s->wake[1]);
        free(s);
        return r;
    }
    *set = (nvmlEventSet_t)s;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    ENTER();
    DEVICE(device, 0);
    NOT_NULL(eventTypes);
    (void)h;
    *eventTypes = g->events;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set)
{
    ENTER();
    DEVICE(device, 0);
    if (eventTypes & ~nvmlEventTypeAll)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&events_lock);
    struct event_set *s = find_set_locked(set);
    nvmlReturn_t r = NVML_SUCCESS;
    if (s == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    else if (eventTypes & ~g->events)
        r = NVML_ERROR_NOT_SUPPORTED; /* none of the requested types is registered */
    else
        s->mask[h->gpu] |= eventTypes;
    pthread_mutex_unlock(&events_lock);
    return r;
}

static long elapsed_ms(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long)(now.tv_sec - start->tv_sec) * 1000L + (now.tv_nsec - start->tv_nsec) / 1000000L;
}

/* Must hold events_lock. */
static int pop_locked(struct event_set *s, nvmlEventData_t *data)
{
    if (s->count == 0)
        return 0;
    *data = s->queue[s->head];
    s->head = (s->head + 1) % EVENT_QUEUE;
    s->count--;
    return 1;
}

static void clear_wake(struct event_set *s)
{
    char sink[64];
    while (read(s->wake[0], sink, sizeof(sink)) > 0) {
    }
}

/* Must hold events_lock; returns with it held. Waits for an event for `s` or the deadline. */
static nvmlReturn_t wait_locked(struct event_set *s, nvmlEventData_t *data, unsigned timeoutms)
{
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        clear_wake(s);
        if (s->channel != NULL)
            drain_locked(s->channel);
        if (pop_locked(s, data))
            return NVML_SUCCESS;
        long left = (long)timeoutms - elapsed_ms(&start);
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        struct pollfd fds[2] = {{.fd = s->wake[0], .events = POLLIN},
                                {.fd = s->channel ? s->channel->fd : -1, .events = POLLIN}};
        pthread_mutex_unlock(&events_lock);
        int n = poll(fds, 2, left > INT_MAX ? INT_MAX : (int)left);
        int poll_errno = errno;
        pthread_mutex_lock(&events_lock);
        if (n < 0)
            return poll_errno == EINTR ? NVML_ERROR_TIMEOUT : NVML_ERROR_UNKNOWN;
    }
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    ENTER();
    (void)m;
    NOT_NULL(data);
    pthread_mutex_lock(&events_lock);
    struct event_set *s = find_set_locked(set);
    nvmlReturn_t r = NVML_ERROR_INVALID_ARGUMENT;
    if (s != NULL) {
        s->waiters++;
        r = wait_locked(s, data, timeoutms);
        s->waiters--;
    }
    pthread_mutex_unlock(&events_lock);
    return r;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    ENTER();
    (void)m;
    pthread_mutex_lock(&events_lock);
    struct event_set *s = find_set_locked(set);
    nvmlReturn_t r = NVML_SUCCESS;
    if (s == NULL) {
        r = NVML_ERROR_INVALID_ARGUMENT;
    } else if (s->waiters > 0) {
        fprintf(stderr, "fake_nvml: nvmlEventSetFree on a set another thread is waiting on "
                        "(undefined in NVML): refused\n");
        r = NVML_ERROR_IN_USE;
    } else {
        for (struct event_set **p = &event_sets; *p != NULL; p = &(*p)->next) {
            if (*p == s) {
                *p = s->next;
                break;
            }
        }
        channel_release_locked(s->channel);
        s->magic = 0;
        close(s->wake[0]);
        close(s->wake[1]);
        free(s);
    }
    pthread_mutex_unlock(&events_lock);
    return r;
}

/*
 * ucx_library.c — see ucx_library.h.
 */
#include "ucx_library.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static struct ucx_library loaded;
static const struct ucx_library *result;
static char load_error[256];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* Where each function is found: libucs holds the status strings, libucp the rest. */
struct symbol {
    const char *name;
    bool in_ucs;
    size_t offset;
};

#define UCP(field) {"ucp_" #field, false, offsetof(struct ucx_library, field)}
static const struct symbol symbols[] = {
    UCP(config_read),     UCP(config_modify),          UCP(config_release),
    UCP(init_version),    UCP(cleanup),                UCP(worker_create),
    UCP(worker_destroy),  UCP(worker_get_address),     UCP(worker_release_address),
    UCP(worker_progress), UCP(ep_create),              UCP(ep_close_nbx),
    UCP(ep_print_info),   UCP(tag_send_nbx),           UCP(tag_recv_nbx),
    UCP(tag_recv_request_test), UCP(tag_probe_nb),     UCP(tag_msg_recv_nbx),
    UCP(request_check_status),  UCP(request_cancel),   UCP(request_free),
    {"ucs_status_string", true, offsetof(struct ucx_library, status_string)},
};
#undef UCP

static void load(void)
{
    /* RTLD_GLOBAL: UCX loads its transports (libuct_*.so) as modules that need these symbols. */
    void *ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
    void *ucp = ucs != NULL ? dlopen("libucp.so.0", RTLD_NOW | RTLD_GLOBAL) : NULL;
    if (ucp == NULL) {
        snprintf(load_error, sizeof load_error,
                 "UCX's libraries cannot be loaded (%s); install UCX (Debian's libucx0)",
                 dlerror());
        return;
    }
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        void *function = dlsym(symbols[i].in_ucs ? ucs : ucp, symbols[i].name);
        if (function == NULL) {
            snprintf(load_error, sizeof load_error,
                     "UCX's libraries lack %s (chorus needs UCX 1.12 or newer)", symbols[i].name);
            return;
        }
        /* POSIX lets a function pointer be stored as a void *'s bytes (dlsym's own contract). */
        memcpy((char *)&loaded + symbols[i].offset, &function, sizeof function);
    }
    result = &loaded;
}

const struct ucx_library *ucx_library_load(char *error, size_t error_size)
{
    pthread_once(&load_once, load);
    if (result == NULL)
        snprintf(error, error_size, "%s", load_error);
    return result;
}

/*
 * ucx_library.h — UCX's functions that transport_ucx.c calls, loaded from libucp.so.0 and
 * libucs.so.0 the first time a process makes a UCX world. libchorus does not link UCX: UCX's
 * libraries hook malloc and mmap as they load, which every process of a chorus user would pay
 * for without an elastic world (and ThreadSanitizer's builds crash on), so only a process that
 * asks for one loads it.
 */
#ifndef CHORUS_UCX_LIBRARY_H
#define CHORUS_UCX_LIBRARY_H

#include <stddef.h>
#include <ucp/api/ucp.h>

struct ucx_library {
    ucs_status_t (*config_read)(const char *, const char *, ucp_config_t **);
    ucs_status_t (*config_modify)(ucp_config_t *, const char *, const char *);
    void (*config_release)(ucp_config_t *);
    /* ucp_init is an inline function of ucp.h over this one */
    ucs_status_t (*init_version)(unsigned, unsigned, const ucp_params_t *, const ucp_config_t *,
                                 ucp_context_h *);
    void (*cleanup)(ucp_context_h);
    ucs_status_t (*worker_create)(ucp_context_h, const ucp_worker_params_t *, ucp_worker_h *);
    void (*worker_destroy)(ucp_worker_h);
    ucs_status_t (*worker_get_address)(ucp_worker_h, ucp_address_t **, size_t *);
    void (*worker_release_address)(ucp_worker_h, ucp_address_t *);
    unsigned (*worker_progress)(ucp_worker_h);
    ucs_status_t (*ep_create)(ucp_worker_h, const ucp_ep_params_t *, ucp_ep_h *);
    ucs_status_ptr_t (*ep_close_nbx)(ucp_ep_h, const ucp_request_param_t *);
    void (*ep_print_info)(ucp_ep_h, FILE *);
    ucs_status_ptr_t (*tag_send_nbx)(ucp_ep_h, const void *, size_t, ucp_tag_t,
                                     const ucp_request_param_t *);
    ucs_status_ptr_t (*tag_recv_nbx)(ucp_worker_h, void *, size_t, ucp_tag_t, ucp_tag_t,
                                     const ucp_request_param_t *);
    ucs_status_t (*tag_recv_request_test)(void *, ucp_tag_recv_info_t *);
    ucp_tag_message_h (*tag_probe_nb)(ucp_worker_h, ucp_tag_t, ucp_tag_t, int,
                                      ucp_tag_recv_info_t *);
    ucs_status_ptr_t (*tag_msg_recv_nbx)(ucp_worker_h, void *, size_t, ucp_tag_message_h,
                                         const ucp_request_param_t *);
    ucs_status_t (*request_check_status)(void *);
    void (*request_cancel)(ucp_worker_h, void *);
    void (*request_free)(void *);
    const char *(*status_string)(ucs_status_t);
};

/* UCX's functions, loaded once per process (any thread); NULL with the reason in `error` when
 * the libraries or a function are missing. The libraries stay loaded until the process ends. */
const struct ucx_library *ucx_library_load(char *error, size_t error_size);

#endif

/*
 * rank_fabric_ucx.c — rank_fabric.h over UCX: one fabric (a UCX worker) per rank, all in this
 * process, connected through their addresses handed over in memory, as the elastic driver hands
 * them over between processes. A world whose messages were all received is kept for the next
 * case of as many ranks (connecting 5 ranks takes 0.04-0.16 s, longer than most cases); any other
 * is destroyed, and the next is a new world with its own epoch, so that nothing a case leaves
 * behind (an interrupted wait's sends) reaches the next.
 */
#include "rank_fabric.h"

#include "../../lib/transport/transport_ucx.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

struct rank_fabric {
    int nranks;
    struct ucx_fabric *ranks[];
};

/* One context for the whole test process (Check runs each test in a process of its own). */
static struct ucx_context *shared_context(void)
{
    static struct ucx_context *context;
    char error[256];
    if (context == NULL && ucx_context_create(&context, error, sizeof error) != CHORUS_OK)
        ck_abort_msg("rank_fabric: %s", error);
    return context;
}

/* The world kept for reuse, or NULL. */
static struct rank_fabric *spare;

static void destroy(struct rank_fabric *fabric)
{
    if (fabric == NULL)
        return;
    for (int r = 0; r < fabric->nranks; r++)
        ucx_fabric_destroy(fabric->ranks[r]);
    free(fabric);
}

struct rank_fabric *rank_fabric_create(int nranks)
{
    static uint16_t epoch;
    if (spare != NULL && spare->nranks == nranks) {
        struct rank_fabric *kept = spare;
        spare = NULL;
        return kept;
    }
    destroy(spare);
    spare = NULL;
    struct ucx_context *context = shared_context();
    struct rank_fabric *fabric = calloc(1, sizeof *fabric + (size_t)nranks * sizeof(void *));
    const void **addresses = calloc((size_t)nranks, sizeof *addresses);
    char error[256] = "";
    bool made = context != NULL && fabric != NULL && addresses != NULL;
    epoch++;
    for (int r = 0; made && r < nranks; r++) {
        made = ucx_fabric_create(context, epoch, &fabric->ranks[r], error, sizeof error) ==
               CHORUS_OK;
        fabric->nranks = r + 1;
        size_t bytes;
        if (made)
            addresses[r] = ucx_fabric_address(fabric->ranks[r], &bytes);
    }
    for (int r = 0; made && r < nranks; r++)
        made = ucx_fabric_connect(fabric->ranks[r], r, nranks, addresses, error, sizeof error) ==
               CHORUS_OK;
    free(addresses);
    if (!made) {
        destroy(fabric);
        ck_abort_msg("rank_fabric: %d ranks over UCX: %s", nranks, error);
    }
    return fabric;
}

void rank_fabric_release(struct rank_fabric *fabric, bool reusable)
{
    if (!reusable || spare != NULL) {
        destroy(fabric);
        return;
    }
    spare = fabric;
}

void rank_fabric_transport(struct rank_fabric *fabric, int rank, struct transport *transport)
{
    transport_ucx_init(transport, fabric->ranks[rank]);
}

const char *rank_fabric_kind(void)
{
    return "ucx";
}

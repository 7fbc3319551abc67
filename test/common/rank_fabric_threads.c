/*
 * rank_fabric_threads.c — rank_fabric.h over the thread transport (mailboxes in memory).
 */
#include "rank_fabric.h"

struct rank_fabric *rank_fabric_create(int nranks)
{
    return (struct rank_fabric *)thread_fabric_create(nranks);
}

void rank_fabric_release(struct rank_fabric *fabric, bool reusable)
{
    (void)reusable;
    thread_fabric_destroy((struct thread_fabric *)fabric);
}

void rank_fabric_transport(struct rank_fabric *fabric, int rank, struct transport *transport)
{
    transport_threads_init(transport, (struct thread_fabric *)fabric, rank);
}

const char *rank_fabric_kind(void)
{
    return "threads";
}

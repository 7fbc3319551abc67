/*
 * retained.h — memory that MPI may still touch after a fatal error: a send or receive that a wait
 * gave up on (its buffer), an abort notice on its way to ranks that may never receive it, the
 * host's segment whose window only a collective call could free. Such memory outlives the
 * chorus instance that allocated it. It is kept here, reachable, rather than leaked, and freed
 * once MPI is finalized by chorus (after which MPI touches nothing).
 */
#ifndef CHORUS_RETAINED_H
#define CHORUS_RETAINED_H

/* Keeps `memory` (from malloc) until retained_free_all; NULL is ignored. Thread-safe. */
void retained_keep(void *memory);
/* Frees everything retained. Call only when MPI can no longer touch it (after MPI_Finalize). */
void retained_free_all(void);

#endif

/*
 * background.c — the background thread of a rank, which calls MPI (and NCCL) for chorus: it runs
 * the loop over the coordinator's parts (background.h) and alone changes the thread's state: the
 * parts report fatal errors, shutdowns and their last message (report.h), and coord_enter acts
 * on them. A user thread that submits an ordered operation while the loop is idle takes the
 * loop's turn (a mutex) and runs it as the loop would (coord_step_as_caller): the two never act
 * at once.
 *
 * Negotiation is asynchronous and event-driven rather than a fixed cycle:
 *   - A rank with new submissions sends them at once to rank 0 in one REQUESTS message (rank 0
 *     feeds its own straight into the negotiator).
 *   - Rank 0 receives REQUESTS from any rank whenever they arrive. As soon as tensors are ready
 *     on every rank (or a mismatch or stall is decided) it sends one RESPONSES message to every
 *     rank and executes the same list itself.
 *   - Every rank executes RESPONSES in the order rank 0 sent them (MPI keeps the order of
 *     messages between two ranks), so all ranks run the same collectives in the same order.
 * No timer sits on the critical path: a lone small allreduce costs one message to rank 0, one
 * back, and the collective. Work that arrives while a collective runs is sent as one message
 * afterwards, and its responses come as one list, which the fusion plan then fuses.
 * CHORUS_CYCLE_TIME_MS adds a minimum spacing between those messages, for more fusion.
 *
 * Idle threads back off: they poll for 50 us, then yield for up to 2 ms, then sleep on a
 * condition variable (woken at once by a submit) for up to 1 ms at a time between polls of MPI.
 *
 * At scale (CHORUS_NEGOTIATION, rounds.h) tensors seen before are agreed instead by rounds, each an
 * allreduce of ready bits, and rank 0's responses are ordered by the rounds.
 *
 * Shutdown: a rank that shuts down sets SHUTDOWN in its requests. Rank 0 then sends a RESPONSES
 * message with SHUTDOWN after everything already agreed; each rank runs what precedes it, fails
 * every pending handle with CHORUS_ERR_SHUTDOWN, sends BYE and stops. Rank 0 stops after every
 * BYE, so no message is left unreceived.
 *
 * The thread's start and end (agreeing on parameters, start-up checks, its main) are in
 * startup.c.
 */
#include "background.h"
#include "../tuning/tuning_agreement.h"

#include "../core/log.h"
#include "../core/timeline.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

/* ----- the state -------------------------------------------------------------------------- */

#define ABORT_GRACE_NANOSECONDS (200 * 1000 * 1000)

/* The one place the thread's state changes. Entering COORD_FAILED stops this rank: the other
 * ranks are told, every handle fails with `status` and `text`, and with
 * CHORUS_ABORT_ON_FAILURE the job ends. Entering COORD_STOPPING fails what is left with
 * CHORUS_ERR_SHUTDOWN, `text` saying why. */
static void coord_enter(struct background *background, enum coord_state state,
                        chorus_status status, const char *text)
{
    if (background->state == COORD_FAILED || background->state == COORD_FINISHED)
        return;
    if (state == COORD_FAILED) {
        LOG(LOG_ERROR, "background", "%s", text);
        runner_abort(&background->runner, status, text);
        pending_fail_all(&background->pending, status, text);
        transfers_fail_all(&background->transfers, status, text);
        background->state = COORD_FAILED;
        if (background->context->params.values.abort_on_failure) {
            bool mpi = background->context->links == NULL;
            LOG(LOG_ERROR, "background", "ending the %s with %s (CHORUS_ABORT_ON_FAILURE)",
                mpi ? "job" : "process", mpi ? "MPI_Abort" : "exit status 1");
            /* A moment for the application's threads, woken with the error, to report it. */
            nanosleep(&(struct timespec){.tv_nsec = ABORT_GRACE_NANOSECONDS}, NULL);
            if (!mpi)
                _exit(1); /* a world without MPI: its maker sees the process end */
            MPI_Abort(background->context->user_comm, 1);
        }
        return;
    }
    if (state == COORD_STOPPING && background->state == COORD_RUNNING) {
        char message[700];
        snprintf(message, sizeof message, "chorus shut down before it completed (%s)", text);
        pending_fail_all(&background->pending, CHORUS_ERR_SHUTDOWN, message);
        transfers_fail_all(&background->transfers, CHORUS_ERR_SHUTDOWN, message);
    }
    if (state == COORD_STOPPING && background->state != COORD_RUNNING)
        return;
    background->state = state;
}

/* Acts on what the parts reported, then clears the report. Returns whether the loop goes on. */
static bool coord_settle(struct background *background)
{
    struct coord_report *report = &background->report;
    if (!report_pending(report)) /* the common case, on every turn of the loop */
        return background->state == COORD_RUNNING || background->state == COORD_STOPPING;
    if (report->failure != CHORUS_OK) {
        coord_enter(background, COORD_FAILED, report->failure, report->failure_text);
    } else {
        if (report->shutdown)
            coord_enter(background, COORD_STOPPING, CHORUS_ERR_SHUTDOWN,
                        report->shutdown_reason);
        if (report->finished)
            coord_enter(background, COORD_FINISHED, CHORUS_OK, "");
    }
    report->failure = CHORUS_OK;
    report->shutdown = report->finished = false;
    return background->state == COORD_RUNNING || background->state == COORD_STOPPING;
}

/* ----- idling ----------------------------------------------------------------------------- */

/* How long an idle loop may sleep at a time, and what it has already sent: read while the
 * thread holds its turn, for idle() to use once it has let go of it. */
struct idle_view {
    double cap;
    bool shutdown_sent, join_sent;
    bool oversubscribed; /* more ranks than processing units on this host: never spin */
};

static struct idle_view idle_view_of(const struct background *background)
{
    const struct pending *pending = &background->pending;
    double cap = pending->table.size > 0 || background->rank == 0 ||
                         background->runner.executor.joined
                     ? 1e-3
                     : 5e-3;
    /* Rounds advance only while every rank polls them (MPI progresses a non-blocking
     * collective inside MPI calls); through the host's slots a rank publishes its part when it
     * looks, every IDLE_ROUND_SPACING (1 ms) while idle, and naps as long. */
    if (background->rounds.on)
        cap = background->rounds.slots_ready ? 1e-3 : 2e-4;
    /* A transfer completes only where the loop tests it. */
    if (transfers_in_flight(&background->transfers))
        cap = 1e-4;
    return (struct idle_view){.cap = cap, .shutdown_sent = pending->shutdown_sent,
                              .join_sent = pending->join_sent,
                              .oversubscribed = background->settings.oversubscribed};
}

/* Called without the turn, so that a user thread may take it meanwhile. */
static void idle(struct chorus_context *context, double idle_since, struct idle_view view)
{
    double idle_time = clock_seconds() - idle_since;
    if (idle_time < 50e-6 && !view.oversubscribed)
        return;
    if (idle_time < 2e-3) {
        sched_yield();
        return;
    }
    double nap = idle_time / 16;
    nap = nap < 50e-6 ? 50e-6 : nap > view.cap ? view.cap : nap;
    struct timespec deadline = clock_deadline(CLOCK_MONOTONIC, nap);
    pthread_mutex_lock(&context->lock);
    bool work = context->queue_head != NULL ||
                (context->shutdown_requested && !view.shutdown_sent) ||
                (context->join_requested && !view.join_sent);
    if (!work)
        pthread_cond_timedwait(&context->wakeup, &context->lock, &deadline);
    pthread_mutex_unlock(&context->lock);
}

/* ----- the timeline ----------------------------------------------------------------------- */

/* Rank 0: records from now on into `timeline` (NULL: none), negotiation spans included. */
void coord_adopt_timeline(struct background *background, struct timeline *timeline)
{
    background->runner.executor.timeline = timeline;
    background->star.negotiator.resolved = timeline != NULL ? star_timeline_negotiated : NULL;
    background->star.negotiator.resolved_context = timeline;
}

/* The user threads' timeline marks, and a switch of timeline they asked for. */
static void follow_timeline(struct background *background)
{
    struct chorus_context *context = background->context;
    if (!atomic_load(&context->timeline_work))
        return;
    pthread_mutex_lock(&context->lock);
    atomic_store(&context->timeline_work, false);
    /* Marks made before a switch belong to the timeline being switched from. */
    struct timeline *marked = background->runner.executor.timeline;
    struct timeline_mark *marks = context->marks_head;
    context->marks_head = context->marks_tail = NULL;
    bool switched = context->timeline_switch_pending;
    if (switched) {
        coord_adopt_timeline(background, context->timeline_switch);
        context->timeline_switch_pending = false;
        pthread_cond_broadcast(&context->timeline_switched);
    }
    pthread_mutex_unlock(&context->lock);
    while (marks != NULL) {
        struct timeline_mark *next = marks->next;
        timeline_span(marked, 0, marks->row, marks->label, marks->start, marks->end,
                      "\"source\": \"chorus_timeline_mark\"");
        timeline_mark_free(marks);
        marks = next;
    }
    if (switched)
        timeline_close(marked);
}

/* ----- taking submissions ----------------------------------------------------------------- */

/* Takes the user threads' submissions and routes each: an ordered one runs now, in the order
 * submitted; a negotiated one becomes a ready-round bit where rounds can carry it, else a
 * description for rank 0. Returns true if there was any. */
static bool take_submissions(struct background *background)
{
    if (background->rank == 0) /* marks and timelines are rank 0's alone */
        follow_timeline(background);
    struct pending *pending = &background->pending;
    uint32_t raised = 0;
    struct request *taken = pending_take_submissions(pending, &raised);
    bool any = taken != NULL || raised != 0 || pending->ordered_head != NULL;
    while (taken != NULL) {
        struct request *next = taken->next;
        taken->next = NULL;
        if (!rounds_take(&background->rounds, &background->star.cache, &taken->desc) &&
            !pending_queue_unsent(pending, &background->star.cache, &taken->desc))
            pending_finish(pending, pending_take(pending, &taken->desc),
                           CHORUS_ERR_OUT_OF_MEMORY, "out of memory in the background thread");
        taken = next;
    }
    /* Ordered operations run now, and transfers are posted, in call order; after a fatal error
     * the rest stay queued, and fail with it. */
    struct request *ordered;
    while (!report_pending(&background->report) && (ordered = pending_next_ordered(pending))) {
        if (ordered->kind == REQUEST_TRANSFER)
            transfers_post(&background->transfers, ordered);
        else
            ordered_run(&background->ordered, ordered, &background->report);
    }
    if (raised & WIRE_FLAG_JOIN) {
        background->runner.executor.joined = true;
        background->rounds.state.joined = background->rounds.on;
    }
    return any;
}

/* Whether everything queued is ordered, and no shutdown or join waits to be sent: what a user
 * thread may take on its turn (the rest needs the loop: messages to rank 0, their answers). */
static bool only_ordered_queued(struct background *background)
{
    struct chorus_context *context = background->context;
    const struct pending *pending = &background->pending;
    pthread_mutex_lock(&context->lock);
    bool only = context->queue_head != NULL &&
                !(context->shutdown_requested && !pending->shutdown_sent) &&
                !(context->join_requested && !pending->join_sent);
    for (const struct request *r = context->queue_head; only && r != NULL; r = r->next)
        only = r->ordered;
    pthread_mutex_unlock(&context->lock);
    return only;
}

bool coord_step_as_caller(struct chorus_context *context)
{
    if (pthread_mutex_trylock(&context->coordinator_turn) != 0)
        return false;
    struct background *background = context->coordinator;
    bool stepped = background != NULL && background->state == COORD_RUNNING &&
                   only_ordered_queued(background);
    if (stepped) {
        take_submissions(background);
        coord_settle(background);
        /* The background thread steps aside while this thread runs its operations (across
         * hosts, each a wait on the network that its turns would share the core and MPI's
         * lock with). */
        atomic_store_explicit(&context->driven_at, clock_seconds(), memory_order_relaxed);
    }
    pthread_mutex_unlock(&context->coordinator_turn);
    return stepped;
}

/* ----- the loop --------------------------------------------------------------------------- */

/* While a user thread turns the loop as it waits (coord_drive) or runs its ordered operations
 * itself (coord_step_as_caller), each marking when it last did, the background thread gives up
 * its turn and waits, rather than take the turn back after every operation of that thread:
 * where the two share a core, each such hand-off would be a context switch on the operation's
 * path. It waits on its condition variable for DRIVER_PARK_SECONDS (a submit that wakes it
 * meanwhile finds the fresh thread taking its submission at its next turn) and then takes one
 * turn, since a thread that only runs ordered operations turns no other part of the loop
 * (negotiation, notices, heartbeats). It goes back to work once no thread has turned the loop
 * for DRIVER_FRESH_SECONDS, and at once when a thread stops waiting before its operation
 * completed. Returns whether it stepped aside (then with the turn again). */
#define DRIVER_FRESH_SECONDS 100e-6
#define DRIVER_PARK_SECONDS 1e-3

static bool driver_fresh(struct chorus_context *context)
{
    double driven = atomic_load_explicit(&context->driven_at, memory_order_relaxed);
    return driven != 0 && clock_seconds() - driven <= DRIVER_FRESH_SECONDS;
}

static bool step_aside(struct chorus_context *context)
{
    if (!driver_fresh(context))
        return false;
    pthread_mutex_unlock(&context->coordinator_turn);
    /* Parked, not asking for the turn the thread holds: each of its releases would wake this
     * thread only for it to find the turn taken again. */
    pthread_mutex_lock(&context->lock);
    struct timespec deadline = clock_deadline(CLOCK_MONOTONIC, DRIVER_PARK_SECONDS);
    while (pthread_cond_timedwait(&context->wakeup, &context->lock, &deadline) != ETIMEDOUT &&
           driver_fresh(context)) {
        /* Woken by a submit that the fresh thread takes at its next turn. */
    }
    pthread_mutex_unlock(&context->lock);
    pthread_mutex_lock(&context->coordinator_turn);
    return true;
}

/* How often a turn looks for other ranks' failure notices (coord_turn): a look is an MPI_Test,
 * which over TCP polls the sockets (20 us across emulated hosts, each turn's largest part at
 * every 20 us), and failures are told in seconds (timeouts), so a millisecond later is the same. */
#define PEER_CHECK_SPACING 1e-3

/* One turn of the loop over its parts: a user thread's fatal error first, then submissions,
 * transfers, negotiation (rank 0's part, a follower's, or rounds), pending sends, other ranks'
 * notices and heartbeats. Returns whether the loop goes on; *active says whether the turn did
 * anything. Under the coordinator's turn, by the background thread or a user thread that
 * drives the loop while it waits (coord_drive). */
static bool coord_turn(struct background *background, bool *active)
{
    struct chorus_context *context = background->context;
    struct star *star = &background->star;
    struct coord_report *report = &background->report;
    *active = false;
    /* A user thread's fatal error (a lane's timeout; its message is set before its status):
     * that thread went on after it, and may have asked for the shutdown since, which must not
     * be taken for an orderly one (the other ranks would then end this instance differently,
     * and wait for each other in collective frees). */
    chorus_status user = atomic_load(&context->user_failure);
    if (user != CHORUS_OK) {
        report_fail(report, user, "%s", context->user_failure_message);
        return coord_settle(background);
    }
    bool going = true;
    /* One reading of the clock for the turn's parts: a reading costs about as much as a part
     * with nothing to do. */
    double now = background->turn_at = clock_seconds();
    bool stopping = background->state == COORD_STOPPING;
    if (!stopping) {
        *active |= take_submissions(background);
        *active |= transfers_progress(&background->transfers);
        *active |= star_flush(star, report);
        going = coord_settle(background);
    }
    stopping = background->state == COORD_STOPPING;
    if (going && background->rank == 0)
        *active |= star_coordinate(star, stopping, now, report);
    else if (going && !background->rounds.on && !stopping)
        *active |= star_follow(star, report);
    going = going && coord_settle(background);
    if (going)
        *active |= rounds_progress(&background->rounds, star,
                                   background->state == COORD_STOPPING, now, report);
    going = going && coord_settle(background);
    star_progress(star, false, false);
    /* Another rank's notice that it failed, unless this rank already stopped (after a batch
     * that failed because of it, say): one report per failure. Looked for every
     * PEER_CHECK_SPACING: a look costs as much as a small collective, and a notice seen a
     * millisecond later changes nothing (waits look for it too). */
    char failure[1024];
    chorus_status peer = CHORUS_OK;
    if (going && now - background->peers_checked_at >= PEER_CHECK_SPACING) {
        background->peers_checked_at = now;
        peer = executor_peer_failure(&background->runner.executor, failure, sizeof failure);
    }
    if (peer != CHORUS_OK)
        report_fail(report, peer, "%s", failure);
    going = going && coord_settle(background);
    /* After the notices: a rank woken from a freeze learns first that the others gave up. */
    if (going)
        *active |= star_keep_alive(star, background->state == COORD_STOPPING, now, report);
    return going && coord_settle(background);
}

void coord_loop(struct background *background)
{
    struct chorus_context *context = background->context;
    struct star *star = &background->star;
    pthread_mutex_lock(&context->coordinator_turn);
    background->active_at = clock_seconds();
    context->coordinator = background;
    bool going = coord_settle(background);
    while (going) {
        if (step_aside(context)) {
            going = coord_settle(background); /* a user thread's turns may have ended it */
            if (!going)
                continue;
        }
        size_t ordered_before = background->ordered.run_count;
        bool active = false;
        going = coord_turn(background, &active);
        if (active && going && background->ordered.run_count != ordered_before) {
            /* The user thread that an ordered operation's completion woke may run its next one
             * itself: yield the core to it without the turn (executor_ran did not yield). */
            pthread_mutex_unlock(&context->coordinator_turn);
            sched_yield();
            pthread_mutex_lock(&context->coordinator_turn);
            going = coord_settle(background);
        }
        if (active) {
            background->active_at = clock_seconds();
        } else if (going) {
            /* Since the last activity: a user thread that drove the loop meanwhile moved it. */
            double idle_since = background->active_at;
            struct idle_view view = idle_view_of(background);
            pthread_mutex_unlock(&context->coordinator_turn);
            idle(context, idle_since, view);
            pthread_mutex_lock(&context->coordinator_turn);
            going = coord_settle(background); /* a user thread's turn may have ended it */
        }
    }
    context->coordinator = NULL;
    pthread_mutex_unlock(&context->coordinator_turn);
    bool failed = background->state == COORD_FAILED || background->runner.executor.aborted;
    star_progress(star, true, failed);
    LOG(LOG_INFO, "negotiation",
        "by %s: %zu messages sent, %zu received, %zu rounds (each an allreduce of %zu bytes)",
        background->rounds.on ? "rounds" : "star", star->messages_sent,
        star->messages_received, background->rounds.posted_count,
        background->rounds.on ? ready_rounds_vector_words(&background->rounds.state) * 8 : 0);
}

/* How long a user thread that waits for its operation goes on turning the loop while nothing
 * happens, before it gives the turn back and sleeps: as long as the background thread itself
 * spins before it yields (idle), so that a peer a few microseconds behind is still met by a
 * thread that turns the loop. */
#define DRIVE_QUIET_SECONDS 50e-6
/* The same where the host has more ranks than cores: the peers it waits for need this core in
 * turn, so they take longer, and the thread yields between turns meanwhile; handing over to the
 * background thread would cost two more context switches. As long as a lane's wait yields
 * before it sleeps (SMALL_YIELD_SECONDS). */
#define DRIVE_QUIET_OVERSUBSCRIBED_SECONDS 1e-3
/* The same where the job spans hosts: a negotiated operation waits for the network two or three
 * times (its request, rank 0's answer, the collective), 20-100 us each over TCP, and a turn that
 * polls the sockets finds nothing for that long; a thread that gave up after DRIVE_QUIET_SECONDS
 * handed the answer to the background thread and was woken by it, 35-50 us more a collective
 * across two emulated hosts. */
#define DRIVE_QUIET_ACROSS_HOSTS_SECONDS 1e-3
/* How long a waiting thread tries to take the turn from a busy background thread, which steps
 * aside at the end of its turn (coord_loop). */
#define DRIVE_TAKEOVER_SECONDS 20e-6

bool coord_drive(struct chorus_context *context, const struct chorus_handle *handle)
{
    double now = clock_seconds(), give_up = now + DRIVE_TAKEOVER_SECONDS;
    atomic_store(&context->driven_at, now); /* the background thread steps aside */
    while (pthread_mutex_trylock(&context->coordinator_turn) != 0) {
        if (atomic_load_explicit(&handle->status, memory_order_acquire) != CHORUS_IN_PROGRESS ||
            clock_seconds() > give_up) {
            atomic_store(&context->driven_at, 0.0);
            return false;
        }
        sched_yield();
    }
    struct background *background = context->coordinator;
    bool drove = background != NULL &&
                 (background->state == COORD_RUNNING || background->state == COORD_STOPPING);
    double quiet_since = clock_seconds();
    double quiet_limit = background == NULL ? DRIVE_QUIET_SECONDS
                         : background->settings.oversubscribed ? DRIVE_QUIET_OVERSUBSCRIBED_SECONDS
                         : context->topology.cross_size > 1    ? DRIVE_QUIET_ACROSS_HOSTS_SECONDS
                                                               : DRIVE_QUIET_SECONDS;
    if (drove)
        background->driven_by_caller = true;
    while (drove && atomic_load_explicit(&handle->status, memory_order_acquire) ==
                        CHORUS_IN_PROGRESS) {
        bool active = false;
        if (!coord_turn(background, &active))
            break;
        now = background->turn_at;
        atomic_store_explicit(&context->driven_at, now, memory_order_relaxed);
        if (active)
            quiet_since = background->active_at = now;
        else if (now - quiet_since > quiet_limit)
            break;
        else if (background->settings.oversubscribed)
            sched_yield(); /* the peers it waits for may need this core */
    }
    if (drove)
        background->driven_by_caller = false;
    bool done =
        atomic_load_explicit(&handle->status, memory_order_acquire) != CHORUS_IN_PROGRESS;
    pthread_mutex_unlock(&context->coordinator_turn);
    if (!done) {
        /* Waiting longer: the background thread takes over at once. */
        atomic_store(&context->driven_at, 0.0);
        pthread_mutex_lock(&context->lock);
        pthread_cond_signal(&context->wakeup);
        pthread_mutex_unlock(&context->lock);
    }
    return drove;
}

void coord_teardown(struct background *background)
{
    bool failed = background->state == COORD_FAILED || background->runner.executor.aborted;
    ordered_release(&background->ordered);
    transfers_release(&background->transfers);
    runner_release(&background->runner);
    rounds_release(&background->rounds, failed);
    autotune_release(&background->autotune);
    star_release(&background->star);
    pending_destroy(&background->pending);
    if (background->channel.release != NULL)
        background->channel.release(background->channel.state, failed);
    background->channel = (struct channel){0};
    tuning_free(&background->tuning);
}

/*
 * negotiation_stalls.c — the stall inspector: warns of tensors that some ranks submitted and
 * others not, fails them after CHORUS_STALL_SHUTDOWN_SECONDS, and keeps the ranks in step after
 * that. A rank that runs one collective more than the others (say, it went on with a loop the
 * others left after an exception) waits for a partner that never comes, while the others wait
 * for its next one; both are given up, and without more the rank would stay one collective
 * behind for good, every later call stalling in turn. So each tensor given up is owed by the
 * ranks that had not submitted it: when such a rank submits it within the stall time, it fails
 * there at once, and every rank has again submitted each name the same number of times.
 */
#include "negotiation_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct stall_debt {
    int set; /* with the name, the key (request_name_set) */
    char *name;
    char *message; /* the failure the other ranks received */
    bool *owed;    /* per rank */
    int owed_count;
    double given_up_at;
    struct stall_debt *next;
};

static void stall_debt_free(struct stall_debt *debt)
{
    free(debt->name);
    free(debt->message);
    free(debt->owed);
    free(debt);
}

void negotiator_free_stall_debts(struct negotiator *negotiator)
{
    while (negotiator->stall_debts != NULL) {
        struct stall_debt *debt = negotiator->stall_debts;
        negotiator->stall_debts = debt->next;
        stall_debt_free(debt);
    }
}

/* Debts older than the stall time lapse: a rank that late is on its next use of the name. */
static void stall_debts_expire(struct negotiator *negotiator, double now, double lifetime)
{
    struct stall_debt **link = &negotiator->stall_debts;
    while (*link != NULL) {
        struct stall_debt *debt = *link;
        if (now - debt->given_up_at < lifetime) {
            link = &debt->next;
            continue;
        }
        *link = debt->next;
        stall_debt_free(debt);
    }
}

/* Grouped tensors are not owed: a rank submits a group whole, and its members fail together
 * through the group's own bookkeeping. */
static void stall_debt_record(struct negotiator *negotiator, int set, const char *name,
                              const struct wire_request *reference, const int *missing,
                              size_t missing_count, const char *message)
{
    if (missing_count == 0 || (reference->group_size > 1 && reference->group != NULL &&
                               reference->group[0] != '\0'))
        return;
    struct stall_debt *debt = calloc(1, sizeof *debt);
    if (debt == NULL)
        return;
    debt->set = set;
    debt->name = strdup(name);
    debt->message = strdup(message);
    debt->owed = calloc((size_t)negotiator->nranks, sizeof *debt->owed);
    if (debt->name == NULL || debt->message == NULL || debt->owed == NULL) {
        stall_debt_free(debt);
        return; /* then a late rank waits for the stall time again, as without debts */
    }
    for (size_t i = 0; i < missing_count; i++)
        debt->owed[missing[i]] = true;
    debt->owed_count = (int)missing_count;
    debt->given_up_at = negotiator->now;
    debt->next = negotiator->stall_debts;
    negotiator->stall_debts = debt;
}

bool negotiator_settle_stall_debt(struct negotiator *negotiator, int rank,
                                  const struct wire_request *request)
{
    for (struct stall_debt **link = &negotiator->stall_debts; *link != NULL;
         link = &(*link)->next) {
        struct stall_debt *debt = *link;
        if (!debt->owed[rank] || debt->set != request_name_set(request) ||
            strcmp(debt->name, request->name) != 0)
            continue;
        char *message = text_format("%s; rank %d submitted it %.1f s later and fails too",
                                    debt->message, rank, negotiator->now - debt->given_up_at);
        negotiator_mark_ranks(negotiator,
                              negotiator_add_error(negotiator, request, CHORUS_ERR_STALLED,
                                                   message),
                              NULL, rank);
        debt->owed[rank] = false;
        if (--debt->owed_count == 0) {
            *link = debt->next;
            stall_debt_free(debt);
        }
        return true;
    }
    return false;
}

void negotiator_check_stalls(struct negotiator *negotiator, double now, double warn_after,
                             double fail_after, stall_warning warn, void *context)
{
    negotiator->now = now;
    stall_debts_expire(negotiator, now, fail_after);
    struct negotiation_entry *entry = negotiator->oldest;
    while (entry != NULL) {
        struct negotiation_entry *newer = entry->newer;
        double waited = now - entry->first_seen;
        bool warn_now = warn_after > 0 && now - entry->last_warning >= warn_after;
        bool fail_now = fail_after > 0 && waited >= fail_after;
        if (!warn_now && !fail_now) {
            entry = newer;
            continue;
        }
        int *have = calloc((size_t)negotiator->nranks, sizeof *have);
        int *missing = calloc((size_t)negotiator->nranks, sizeof *missing);
        size_t have_count = 0, missing_count = 0;
        const struct wire_request *reference = NULL;
        const struct process_set *set = negotiator_set_of(negotiator, entry->process_set);
        for (int r = 0; have != NULL && missing != NULL && r < negotiator->nranks; r++) {
            if (entry->requests[r].name != NULL) {
                have[have_count++] = r;
                if (reference == NULL)
                    reference = &entry->requests[r];
            } else if (!negotiator->joined[r] &&
                       (set == NULL || process_set_rank_of(set, r) >= 0)) {
                missing[missing_count++] = r;
            }
        }
        char *have_text = text_rank_list(have, have_count);
        char *missing_text = text_rank_list(missing, missing_count);
        char *described = set != NULL ? process_set_describe(set) : NULL;
        char *message =
            text_format("%s \"%s\": submitted %.0f s ago by %s %s but not by %s %s%s%s",
                          reference ? request_collective_name(reference) : "tensor", entry->name,
                          waited, have_count == 1 ? "rank" : "ranks", have_text ? have_text : "?",
                          missing_count == 1 ? "rank" : "ranks", missing_text ? missing_text : "?",
                          described ? " of " : "", described ? described : "");
        free(described);
        if (warn_now && warn != NULL && message != NULL) {
            warn(context, message);
            entry->last_warning = now;
        }
        if (fail_now && reference != NULL) {
            char *failure =
                text_format("%s; giving up after %g s (CHORUS_STALL_SHUTDOWN_SECONDS)",
                              message ? message : entry->name, fail_after);
            if (failure != NULL)
                stall_debt_record(negotiator, entry->process_set, entry->name, reference,
                                  missing, missing_count, failure);
            negotiator_mark_ranks(negotiator,
                                  negotiator_add_error(negotiator, reference, CHORUS_ERR_STALLED,
                                                       failure),
                                  entry->requests, -1);
            negotiator_entry_unlink(negotiator, entry);
            negotiator_entry_free(negotiator, entry);
        }
        free(message);
        free(have_text);
        free(missing_text);
        free(have);
        free(missing);
        entry = newer;
    }
}

/*
 * test_negotiation.c — the coordinator's bookkeeping fed with requests from fake ranks, without
 * MPI: readiness, ordering, every kind of mismatch, groups, join and the stall inspector.
 */
#include "../../lib/negotiation/negotiation.h"

#include "../common/check_runner.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct wire_request allreduce(const char *name)
{
    struct wire_request request = {.name = (char *)name,
                                   .collective = CHORUS_ALLREDUCE,
                                   .dtype = CHORUS_FLOAT32,
                                   .op = CHORUS_SUM,
                                   .ndims = 2,
                                   .shape = {3, 4},
                                   .device = -1,
                                   .prescale = 1,
                                   .postscale = 1,
                                   .group = "",
                                   .group_size = 1};
    return request;
}

static struct negotiator negotiator;
static struct wire_response *responses;
static size_t response_count;

static void take(void)
{
    for (size_t i = 0; i < response_count; i++)
        wire_response_free(&responses[i]);
    free(responses);
    response_count = negotiator_take_responses(&negotiator, &responses);
}

static void setup(void)
{
    ck_assert(negotiator_init(&negotiator, 3));
    responses = NULL;
    response_count = 0;
}

static void teardown(void)
{
    take();
    take();
    negotiator_destroy(&negotiator);
}

START_TEST(ready_only_when_every_rank_submitted)
{
    struct wire_request a = allreduce("a");
    negotiator_submit(&negotiator, 0, &a, 0);
    negotiator_submit(&negotiator, 2, &a, 0);
    take();
    ck_assert_uint_eq(response_count, 0);
    ck_assert_uint_eq(negotiator_pending(&negotiator), 1);
    negotiator_submit(&negotiator, 1, &a, 0);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].type, RESPONSE_EXECUTE);
    ck_assert_str_eq(responses[0].request.name, "a");
    ck_assert_uint_eq(responses[0].contributors, 3);
    ck_assert_uint_eq(negotiator_pending(&negotiator), 0);
}
END_TEST

/* Where each rank's allreduce buffer lies is its own, never a mismatch; the response says the
 * tensor is in the shared heap only when it is on every rank (the selection then reduces it in
 * place on every rank alike). */
START_TEST(the_shared_heap_is_every_ranks_or_nobodys)
{
    struct wire_request in_heap = allreduce("heap"), elsewhere = allreduce("heap");
    in_heap.in_shared_heap = 1;
    negotiator_submit(&negotiator, 0, &in_heap, 0);
    negotiator_submit(&negotiator, 1, &elsewhere, 0);
    negotiator_submit(&negotiator, 2, &in_heap, 0);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].type, RESPONSE_EXECUTE);
    ck_assert_uint_eq(responses[0].request.in_shared_heap, 0);
    struct wire_request all = allreduce("all");
    all.in_shared_heap = 1;
    for (int r = 0; r < 3; r++)
        negotiator_submit(&negotiator, r, &all, 0);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_uint_eq(responses[0].request.in_shared_heap, 1);
}
END_TEST

START_TEST(order_is_the_order_of_completion)
{
    const char *names[] = {"w0", "w1", "w2", "w3"};
    /* Ranks submit in different orders; a name is ready when its last rank submits it. */
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 4; i++) {
            int index = r == 1 ? 3 - i : i;
            struct wire_request request = allreduce(names[index]);
            negotiator_submit(&negotiator, r, &request, 0);
        }
    take();
    ck_assert_uint_eq(response_count, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_str_eq(responses[i].request.name, names[i]);
}
END_TEST

/* Submits `name` from 3 ranks with rank 1 changed by `change`, and returns the error. */
static const char *mismatch(void (*change)(struct wire_request *))
{
    struct wire_request same = allreduce("fc1.weight");
    struct wire_request different = same;
    change(&different);
    negotiator_submit(&negotiator, 0, &same, 0);
    negotiator_submit(&negotiator, 1, &different, 0);
    negotiator_submit(&negotiator, 2, &same, 0);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].type, RESPONSE_ERROR);
    ck_assert_int_eq(responses[0].status, CHORUS_ERR_MISMATCH);
    return responses[0].message;
}

static void to_float16(struct wire_request *r) { r->dtype = CHORUS_FLOAT16; }
static void to_other_shape(struct wire_request *r) { r->shape[1] = 5; }
static void to_max(struct wire_request *r) { r->op = CHORUS_MAX; }
static void to_broadcast(struct wire_request *r) { r->collective = CHORUS_BROADCAST; }
static void to_prescale(struct wire_request *r) { r->prescale = 0.5; }
static void to_gpu(struct wire_request *r) { r->device = 0; }

START_TEST(mismatches_name_tensor_field_and_ranks)
{
    ck_assert_str_eq(mismatch(to_float16),
                     "allreduce \"fc1.weight\": dtype mismatch: ranks 0,2 float32, rank 1 float16");
    ck_assert_str_eq(mismatch(to_other_shape),
                     "allreduce \"fc1.weight\": shape mismatch: ranks 0,2 [3,4], rank 1 [3,5]");
    ck_assert_str_eq(mismatch(to_max),
                     "allreduce \"fc1.weight\": op mismatch: ranks 0,2 sum, rank 1 max");
    ck_assert_str_eq(mismatch(to_broadcast), "tensor \"fc1.weight\": collective mismatch: ranks "
                                             "0,2 allreduce, rank 1 broadcast");
    ck_assert_str_eq(mismatch(to_prescale), "allreduce \"fc1.weight\": prescale factor mismatch: "
                                            "ranks 0,2 1, rank 1 0.5");
    ck_assert_str_eq(mismatch(to_gpu),
                     "allreduce \"fc1.weight\": device mismatch: ranks 0,2 host, rank 1 gpu");
}
END_TEST

START_TEST(broadcast_roots_must_agree)
{
    struct wire_request request = allreduce("embedding");
    request.collective = CHORUS_BROADCAST;
    for (int r = 0; r < 3; r++) {
        request.root = r == 2 ? 1 : 0;
        negotiator_submit(&negotiator, r, &request, 0);
    }
    take();
    ck_assert_str_eq(responses[0].message,
                     "broadcast \"embedding\": root mismatch: ranks 0-1 0, rank 2 1");
}
END_TEST

START_TEST(allgather_first_dimension_may_differ)
{
    struct wire_request request = allreduce("rows");
    request.collective = CHORUS_ALLGATHER;
    for (int r = 0; r < 3; r++) {
        request.shape[0] = r * 2;
        negotiator_submit(&negotiator, r, &request, 0);
    }
    take();
    ck_assert_int_eq(responses[0].type, RESPONSE_EXECUTE);
    ck_assert_uint_eq(responses[0].first_dim_count, 3);
    ck_assert_int_eq(responses[0].first_dims[0], 0);
    ck_assert_int_eq(responses[0].first_dims[2], 4);

    struct wire_request other = allreduce("cols");
    other.collective = CHORUS_ALLGATHER;
    for (int r = 0; r < 3; r++) {
        other.shape[1] = r == 0 ? 8 : 4;
        negotiator_submit(&negotiator, r, &other, 0);
    }
    take();
    ck_assert_str_eq(responses[0].message,
                     "allgather \"cols\": shape mismatch: rank 0 [*,8], ranks 1-2 [*,4]");
}
END_TEST

START_TEST(group_members_are_released_together)
{
    struct wire_request members[2] = {allreduce("g.a"), allreduce("g.b")};
    for (int i = 0; i < 2; i++) {
        members[i].group = "g.a";
        members[i].group_size = 2;
    }
    for (int r = 0; r < 3; r++)
        negotiator_submit(&negotiator, r, &members[0], 0);
    take();
    ck_assert_uint_eq(response_count, 0);
    for (int r = 0; r < 3; r++)
        negotiator_submit(&negotiator, r, &members[1], 0);
    take();
    ck_assert_uint_eq(response_count, 2);
    ck_assert_str_eq(responses[0].request.name, "g.a");
    ck_assert_str_eq(responses[1].request.name, "g.b");
}
END_TEST

/* The last member of a group to resolve fails (a mismatch): the group is released, and the same
 * group can be submitted again (its state once outlived the group name it was filed under). */
START_TEST(a_group_whose_last_member_fails_can_be_submitted_again)
{
    struct wire_request members[2] = {allreduce("g.a"), allreduce("g.b")};
    for (int i = 0; i < 2; i++) {
        members[i].group = "g.a";
        members[i].group_size = 2;
    }
    struct wire_request wrong = members[1];
    wrong.dtype = CHORUS_FLOAT16;
    for (int r = 0; r < 3; r++)
        negotiator_submit(&negotiator, r, &members[0], 0);
    for (int r = 0; r < 3; r++)
        negotiator_submit(&negotiator, r, r == 1 ? &wrong : &members[1], 0);
    take();
    ck_assert_uint_eq(response_count, 2);
    ck_assert_int_eq(responses[0].type, RESPONSE_ERROR);
    ck_assert_str_eq(responses[0].request.name, "g.b");
    ck_assert_int_eq(responses[1].type, RESPONSE_EXECUTE);
    ck_assert_str_eq(responses[1].request.name, "g.a");
    for (int round = 0; round < 2; round++) {
        for (int r = 0; r < 3; r++)
            for (int m = 0; m < 2; m++)
                negotiator_submit(&negotiator, r, &members[m], 1 + round);
        take();
        ck_assert_uint_eq(response_count, 2);
        ck_assert_int_eq(responses[0].type, RESPONSE_EXECUTE);
        ck_assert_int_eq(responses[1].type, RESPONSE_EXECUTE);
    }
}
END_TEST

/* Ranks 0-1 group {gx, gy}, rank 2 {gx, gz}: gx is agreed everywhere but must not be held
 * forever; every member fails on every rank with a message naming the ranks and the members. */
/* gx, gy and gz as members of the group "gx" of two. */
static void group_of_two(struct wire_request *members[3])
{
    for (int i = 0; i < 3; i++) {
        members[i]->group = "gx";
        members[i]->group_size = 2;
    }
}

/* Whether the responses taken hold a mismatch whose message names `ranks_and_members`. */
static bool mismatch_reported(const char *ranks_and_members)
{
    bool found = false;
    for (size_t i = 0; i < response_count; i++)
        found |= responses[i].type == RESPONSE_ERROR &&
                 responses[i].status == CHORUS_ERR_MISMATCH &&
                 strstr(responses[i].message, ranks_and_members) != NULL;
    return found;
}

START_TEST(a_group_whose_ranks_name_different_members_fails_everywhere)
{
    struct wire_request gx = allreduce("gx"), gy = allreduce("gy"), gz = allreduce("gz");
    struct wire_request *all[3] = {&gx, &gy, &gz};
    group_of_two(all);
    for (int r = 0; r < 3; r++) {
        negotiator_submit(&negotiator, r, &gx, 0);
        negotiator_submit(&negotiator, r, r < 2 ? &gy : &gz, 0);
    }
    take();
    ck_assert_uint_eq(response_count, 3);
    bool seen[3] = {false, false, false};
    for (size_t i = 0; i < response_count; i++) {
        ck_assert_int_eq(responses[i].type, RESPONSE_ERROR);
        ck_assert_int_eq(responses[i].status, CHORUS_ERR_MISMATCH);
        ck_assert_msg(strstr(responses[i].message, "ranks 0-1 {gx, gy}") != NULL &&
                          strstr(responses[i].message, "rank 2 {gx, gz}") != NULL,
                      "%s", responses[i].message);
        for (int n = 0; n < 3; n++)
            seen[n] |= strcmp(responses[i].request.name, all[n]->name) == 0;
    }
    ck_assert(seen[0] && seen[1] && seen[2]);
    ck_assert_uint_eq(negotiator_pending(&negotiator), 0);
    /* The group works again afterwards. */
    for (int r = 0; r < 3; r++) {
        negotiator_submit(&negotiator, r, &gx, 1);
        negotiator_submit(&negotiator, r, &gy, 1);
    }
    take();
    ck_assert_uint_eq(response_count, 2);
    ck_assert_int_eq(responses[0].type, RESPONSE_EXECUTE);
    ck_assert_int_eq(responses[1].type, RESPONSE_EXECUTE);
}
END_TEST

/* Rank `grouped` submits "m.a" and "m.b" as one group, the others singly, for each collective
 * that can be grouped and with the grouped rank first or last: both names fail with a group
 * mismatch naming the ranks (once a grouped allgather or reducescatter beside single ones ran
 * with no error: only allreduce's message compared groups), and nothing stays pending. */
START_TEST(grouped_and_single_submissions_fail_for_every_groupable_collective)
{
    static const chorus_collective groupable[] = {CHORUS_ALLREDUCE, CHORUS_ALLGATHER,
                                                  CHORUS_REDUCESCATTER};
    int grouped = _i % 3;
    chorus_collective collective = groupable[_i / 3];
    struct wire_request single[2] = {allreduce("m.a"), allreduce("m.b")};
    struct wire_request in_group[2] = {allreduce("m.a"), allreduce("m.b")};
    for (int m = 0; m < 2; m++) {
        single[m].collective = in_group[m].collective = (uint8_t)collective;
        in_group[m].group = "m.a";
        in_group[m].group_size = 2;
    }
    for (int r = 0; r < 3; r++)
        for (int m = 0; m < 2; m++)
            negotiator_submit(&negotiator, r, r == grouped ? &in_group[m] : &single[m], 0);
    take();
    ck_assert_uint_eq(response_count, 2);
    char expected[96];
    snprintf(expected, sizeof expected, "group mismatch: ");
    for (size_t i = 0; i < response_count; i++) {
        ck_assert_int_eq(responses[i].type, RESPONSE_ERROR);
        ck_assert_int_eq(responses[i].status, CHORUS_ERR_MISMATCH);
        ck_assert_msg(strstr(responses[i].message, expected) != NULL &&
                          strstr(responses[i].message, "\"m.a\" of 2") != NULL &&
                          strstr(responses[i].message, "none") != NULL,
                      "%s", responses[i].message);
        ck_assert_msg(strncmp(responses[i].message, chorus_collective_name(collective),
                              strlen(chorus_collective_name(collective))) == 0,
                      "%s", responses[i].message);
        for (int r = 0; r < 3; r++)
            ck_assert(response_applies_to(&responses[i], r));
    }
    ck_assert_uint_eq(negotiator_pending(&negotiator), 0);
    /* The names work again, grouped on every rank. */
    for (int r = 0; r < 3; r++)
        for (int m = 0; m < 2; m++)
            negotiator_submit(&negotiator, r, &in_group[m], 1);
    take();
    ck_assert_uint_eq(response_count, 2);
    ck_assert_int_eq(responses[0].type, RESPONSE_EXECUTE);
    ck_assert_int_eq(responses[1].type, RESPONSE_EXECUTE);
}
END_TEST

/* With CHORUS_JOINED_GATHERS=fail (chorus.torch's, as Horovod), an allgather or broadcast
 * that a joined rank did not submit fails, naming it; an allreduce still runs. Without it the
 * allgather runs, the joined rank contributing no rows. */
START_TEST(joined_gathers_fail_when_refused)
{
    bool refuse = _i == 1;
    negotiator.refuse_joined_gathers = refuse;
    struct wire_request gather = allreduce("jg.gather");
    gather.collective = CHORUS_ALLGATHER;
    struct wire_request sum = allreduce("jg.sum");
    negotiator_join(&negotiator, 2);
    for (int r = 0; r < 2; r++) {
        negotiator_submit(&negotiator, r, &gather, 0);
        negotiator_submit(&negotiator, r, &sum, 0);
    }
    take();
    ck_assert_uint_eq(response_count, 2);
    ck_assert_int_eq(responses[0].type, refuse ? RESPONSE_ERROR : RESPONSE_EXECUTE);
    if (refuse) {
        ck_assert_int_eq(responses[0].status, CHORUS_ERR_NOT_SUPPORTED);
        ck_assert_msg(strstr(responses[0].message, "allgather \"jg.gather\": rank 2 has joined") !=
                          NULL,
                      "%s", responses[0].message);
    } else {
        ck_assert_uint_eq(responses[0].first_dim_count, 3);
        ck_assert_int_eq(responses[0].first_dims[2], 0);
    }
    ck_assert_int_eq(responses[1].type, RESPONSE_EXECUTE);
    ck_assert_uint_eq(responses[1].contributors, 2);
}
END_TEST

START_TEST(joined_ranks_count_as_ready_and_join_completes)
{
    struct wire_request a = allreduce("a");
    negotiator_submit(&negotiator, 0, &a, 0);
    negotiator_submit(&negotiator, 1, &a, 0);
    negotiator_join(&negotiator, 2);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_uint_eq(responses[0].contributors, 2);
    negotiator_join(&negotiator, 0);
    negotiator_join(&negotiator, 1);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].type, RESPONSE_JOIN_DONE);
    /* After the join completes, every rank counts again. */
    negotiator_submit(&negotiator, 0, &a, 0);
    take();
    ck_assert_uint_eq(response_count, 0);
}
END_TEST

/* The members are compared also when a rank submitted its whole group and then joined: it counts
 * once, so the comparison waits for rank 2, whose different member is then reported (counted
 * twice, the comparison ran before rank 2 and its gz stalled unreported). */
START_TEST(a_rank_that_submitted_its_group_then_joined_counts_once)
{
    struct wire_request gx = allreduce("gx"), gy = allreduce("gy"), gz = allreduce("gz");
    struct wire_request *all[3] = {&gx, &gy, &gz};
    group_of_two(all);
    negotiator_submit(&negotiator, 0, &gx, 0);
    negotiator_submit(&negotiator, 0, &gy, 0);
    negotiator_join(&negotiator, 0);
    negotiator_submit(&negotiator, 1, &gx, 0);
    negotiator_submit(&negotiator, 1, &gy, 0);
    take();
    ck_assert_uint_eq(response_count, 0);
    negotiator_submit(&negotiator, 2, &gx, 0);
    negotiator_submit(&negotiator, 2, &gz, 0);
    take();
    ck_assert_msg(mismatch_reported("rank 2 {gx, gz}"), "no mismatch among %zu responses",
                  response_count);
}
END_TEST

/* A group that waited only for a join is compared when the join comes. */
START_TEST(a_group_is_compared_when_the_last_rank_joins)
{
    struct wire_request gx = allreduce("gx"), gy = allreduce("gy"), gz = allreduce("gz");
    struct wire_request *all[3] = {&gx, &gy, &gz};
    group_of_two(all);
    negotiator_submit(&negotiator, 0, &gx, 0);
    negotiator_submit(&negotiator, 0, &gy, 0);
    negotiator_submit(&negotiator, 1, &gx, 0);
    negotiator_submit(&negotiator, 1, &gz, 0);
    take();
    ck_assert_uint_eq(response_count, 0);
    negotiator_join(&negotiator, 2);
    take();
    ck_assert_msg(mismatch_reported("rank 1 {gx, gz}"), "no mismatch among %zu responses",
                  response_count);
}
END_TEST

/* A rank that submitted a tensor and then joined counts once, not twice (found by a Horovod
 * script whose ranks left gradients in flight before join: the tensor ran without a rank). */
START_TEST(a_rank_that_submitted_then_joined_counts_once)
{
    struct wire_request b = allreduce("b");
    negotiator_submit(&negotiator, 1, &b, 0);
    negotiator_join(&negotiator, 0);
    negotiator_join(&negotiator, 1);
    take();
    ck_assert_uint_eq(response_count, 0); /* rank 2 neither submitted nor joined */
    negotiator_join(&negotiator, 2);
    take();
    ck_assert_uint_eq(response_count, 2);
    ck_assert_int_eq(responses[0].type, RESPONSE_EXECUTE);
    ck_assert_uint_eq(responses[0].contributors, 1);
    ck_assert_int_eq(responses[1].type, RESPONSE_JOIN_DONE);
    ck_assert_int_eq(responses[1].last_joined_rank, 2); /* the last rank to join */
    /* After the join, a rank's earlier submission counts as before. */
    negotiator_submit(&negotiator, 0, &b, 0);
    negotiator_join(&negotiator, 0);
    negotiator_submit(&negotiator, 1, &b, 0);
    take();
    ck_assert_uint_eq(response_count, 0);
    negotiator_submit(&negotiator, 2, &b, 0);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_uint_eq(responses[0].contributors, 3);
}
END_TEST

static char warnings[4][512];
static int warning_count;

/* Every rank asks to add the set `members` (or, with none, to remove `remove_id`); returns
 * the id rank 0 gave it. */
static struct wire_request set_change(const char *name, int32_t *members, uint32_t count,
                                      int remove_id)
{
    struct wire_request change = allreduce(name);
    change.collective = COLLECTIVE_PROCESS_SET;
    change.ndims = 0;
    change.members = members;
    change.member_count = count;
    change.process_set = remove_id;
    return change;
}

static struct wire_request in_set(const char *name, int id)
{
    struct wire_request request = allreduce(name);
    request.process_set = id;
    return request;
}

static int change_sets(const char *name, int32_t *members, uint32_t count, int remove_id)
{
    struct wire_request change = set_change(name, members, count, remove_id);
    for (int r = 0; r < 3; r++)
        negotiator_submit(&negotiator, r, &change, 0);
    take();
    ck_assert_uint_ge(response_count, 1);
    const struct wire_response *made = &responses[response_count - 1];
    ck_assert_int_eq(made->type, RESPONSE_EXECUTE);
    ck_assert_int_eq(made->request.collective, COLLECTIVE_PROCESS_SET);
    return made->request.process_set;
}

START_TEST(a_sets_tensors_wait_for_its_members_alone)
{
    int32_t ends[] = {0, 2};
    int id = change_sets("change.0", ends, 2, 0);
    ck_assert_int_gt(id, 0);
    struct wire_request gather = allreduce("g");
    gather.collective = CHORUS_ALLGATHER;
    gather.process_set = id;
    gather.shape[0] = 3;
    negotiator_submit(&negotiator, 2, &gather, 0);
    take();
    ck_assert_uint_eq(response_count, 0);
    gather.shape[0] = 5;
    negotiator_submit(&negotiator, 0, &gather, 0);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].type, RESPONSE_EXECUTE);
    ck_assert_int_eq(responses[0].request.process_set, id);
    /* Its members' rows, in the set's rank order: rank 0's, then rank 2's. */
    ck_assert_uint_eq(responses[0].first_dim_count, 2);
    ck_assert_int_eq(responses[0].first_dims[0], 5);
    ck_assert_int_eq(responses[0].first_dims[1], 3);
}
END_TEST

START_TEST(a_rank_outside_a_set_and_an_unknown_set_fail_that_rank_alone)
{
    int32_t ends[] = {0, 2};
    int id = change_sets("change.0", ends, 2, 0);
    struct wire_request outsider = in_set("x", id);
    negotiator_submit(&negotiator, 1, &outsider, 0);
    outsider.process_set = id + 7;
    negotiator_submit(&negotiator, 2, &outsider, 0);
    take();
    ck_assert_uint_eq(response_count, 2);
    ck_assert_int_eq(responses[0].type, RESPONSE_ERROR);
    ck_assert_ptr_nonnull(strstr(responses[0].message, "rank 1 is not a member of process set"));
    ck_assert(response_applies_to(&responses[0], 1) && !response_applies_to(&responses[0], 0));
    ck_assert_ptr_nonnull(strstr(responses[1].message, "does not exist"));
    ck_assert(response_applies_to(&responses[1], 2) && !response_applies_to(&responses[1], 1));
}
END_TEST

START_TEST(removing_a_set_fails_its_pending_and_held_tensors)
{
    int32_t first_two[] = {0, 1};
    int id = change_sets("change.0", first_two, 2, 0);
    struct wire_request pending = in_set("pending", id);
    negotiator_submit(&negotiator, 0, &pending, 0);
    struct wire_request member = in_set("m0", id);
    member.group = "m0";
    member.group_size = 2;
    negotiator_submit(&negotiator, 0, &member, 0);
    negotiator_submit(&negotiator, 1, &member, 0); /* ready, held for m1 */
    take();
    ck_assert_uint_eq(response_count, 0);
    ck_assert_int_eq(change_sets("change.1", NULL, 0, id), id);
    ck_assert_uint_eq(response_count, 3);
    ck_assert_int_eq(responses[0].type, RESPONSE_ERROR);
    ck_assert_str_eq(responses[0].request.name, "pending");
    ck_assert_ptr_nonnull(strstr(responses[0].message, "was removed"));
    ck_assert(response_applies_to(&responses[0], 0) && !response_applies_to(&responses[0], 1));
    ck_assert_int_eq(responses[1].type, RESPONSE_ERROR);
    ck_assert_str_eq(responses[1].request.name, "m0");
    /* A set that no longer exists cannot be removed twice. */
    struct wire_request again = set_change("change.2", NULL, 0, id);
    for (int r = 0; r < 3; r++)
        negotiator_submit(&negotiator, r, &again, 0);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].type, RESPONSE_ERROR);
}
END_TEST

START_TEST(adds_that_name_different_ranks_fail_on_every_rank)
{
    int32_t a[] = {0, 1}, b[] = {0, 2};
    struct wire_request change = set_change("change.0", a, 2, 0);
    negotiator_submit(&negotiator, 0, &change, 0);
    negotiator_submit(&negotiator, 1, &change, 0);
    change.members = b;
    negotiator_submit(&negotiator, 2, &change, 0);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].type, RESPONSE_ERROR);
    ck_assert_str_eq(responses[0].message, "process set change \"change.0\": ranks mismatch: "
                                           "ranks 0-1 {0-1}, rank 2 {0,2}");
}
END_TEST

static void record_warning(void *context, const char *message)
{
    (void)context;
    if (warning_count < 4)
        strncpy(warnings[warning_count], message, sizeof warnings[0] - 1);
    warning_count++;
}

START_TEST(stalls_are_warned_then_failed)
{
    struct wire_request a = allreduce("slow");
    negotiator_submit(&negotiator, 0, &a, 100.0);
    negotiator_submit(&negotiator, 2, &a, 101.0);
    warning_count = 0;
    negotiator_check_stalls(&negotiator, 105.0, 10.0, 30.0, record_warning, NULL);
    ck_assert_int_eq(warning_count, 0);
    negotiator_check_stalls(&negotiator, 111.0, 10.0, 30.0, record_warning, NULL);
    ck_assert_int_eq(warning_count, 1);
    ck_assert_str_eq(warnings[0],
                     "allreduce \"slow\": submitted 11 s ago by ranks 0,2 but not by rank 1");
    negotiator_check_stalls(&negotiator, 112.0, 10.0, 30.0, record_warning, NULL);
    ck_assert_int_eq(warning_count, 1); /* once per interval */
    take();
    ck_assert_uint_eq(response_count, 0);
    negotiator_check_stalls(&negotiator, 131.0, 10.0, 30.0, record_warning, NULL);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].status, CHORUS_ERR_STALLED);
    ck_assert_ptr_nonnull(strstr(responses[0].message, "not by rank 1"));
    ck_assert_uint_eq(negotiator_pending(&negotiator), 0);
    /* It fails the ranks that submitted. Rank 1 owes "slow": its late one fails at once there,
     * and the one after that is a new request. */
    ck_assert(response_applies_to(&responses[0], 0));
    ck_assert(!response_applies_to(&responses[0], 1));
    ck_assert(response_applies_to(&responses[0], 2));
    negotiator_submit(&negotiator, 1, &a, 133.0);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].status, CHORUS_ERR_STALLED);
    ck_assert_ptr_nonnull(strstr(responses[0].message, "rank 1 submitted it 2.0 s later"));
    ck_assert(!response_applies_to(&responses[0], 0));
    ck_assert(response_applies_to(&responses[0], 1));
    negotiator_submit(&negotiator, 1, &a, 134.0);
    take();
    ck_assert_uint_eq(response_count, 0);
    ck_assert_uint_eq(negotiator_pending(&negotiator), 1);
}
END_TEST

/* Rank 1 runs one collective more than the others ("extra"), who went on to "next": both are
 * given up in the same sweep. Rank 1's late "next" fails at once, and "after" runs everywhere:
 * the ranks are in step again instead of rank 1 staying one collective behind. */
START_TEST(a_rank_one_collective_ahead_is_back_in_step_after_a_stall)
{
    struct wire_request extra = allreduce("extra"), next = allreduce("next"),
                        after = allreduce("after");
    negotiator_submit(&negotiator, 0, &next, 100.0);
    negotiator_submit(&negotiator, 1, &extra, 100.0);
    negotiator_submit(&negotiator, 2, &next, 100.0);
    negotiator_check_stalls(&negotiator, 121.0, 0, 20.0, NULL, NULL);
    take();
    ck_assert_uint_eq(response_count, 2);
    ck_assert_uint_eq(negotiator_pending(&negotiator), 0);
    negotiator_submit(&negotiator, 1, &next, 121.3);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].type, RESPONSE_ERROR);
    ck_assert_str_eq(responses[0].request.name, "next");
    ck_assert(response_applies_to(&responses[0], 1));
    ck_assert(!response_applies_to(&responses[0], 0));
    for (int r = 0; r < 3; r++)
        negotiator_submit(&negotiator, r, &after, 121.5);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].type, RESPONSE_EXECUTE);
    ck_assert_str_eq(responses[0].request.name, "after");
}
END_TEST

/* A debt lapses after the stall time: by then the rank's submission is its next use of the name. */
START_TEST(a_stall_debt_lapses_after_the_stall_time)
{
    struct wire_request a = allreduce("step");
    negotiator_submit(&negotiator, 0, &a, 0.0);
    negotiator_submit(&negotiator, 1, &a, 0.0);
    negotiator_check_stalls(&negotiator, 20.0, 0, 20.0, NULL, NULL);
    take();
    ck_assert_uint_eq(response_count, 1);
    negotiator_check_stalls(&negotiator, 41.0, 0, 20.0, NULL, NULL);
    for (int r = 0; r < 3; r++)
        negotiator_submit(&negotiator, r, &a, 41.0);
    take();
    ck_assert_uint_eq(response_count, 1);
    ck_assert_int_eq(responses[0].type, RESPONSE_EXECUTE);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("negotiation");
    TCase *tc = tcase_create("negotiation");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, ready_only_when_every_rank_submitted);
    tcase_add_test(tc, the_shared_heap_is_every_ranks_or_nobodys);
    tcase_add_test(tc, order_is_the_order_of_completion);
    tcase_add_test(tc, mismatches_name_tensor_field_and_ranks);
    tcase_add_test(tc, broadcast_roots_must_agree);
    tcase_add_test(tc, allgather_first_dimension_may_differ);
    tcase_add_test(tc, group_members_are_released_together);
    tcase_add_test(tc, a_group_whose_last_member_fails_can_be_submitted_again);
    tcase_add_test(tc, a_group_whose_ranks_name_different_members_fails_everywhere);
    tcase_add_loop_test(tc, grouped_and_single_submissions_fail_for_every_groupable_collective, 0,
                        9);
    tcase_add_test(tc, joined_ranks_count_as_ready_and_join_completes);
    tcase_add_loop_test(tc, joined_gathers_fail_when_refused, 0, 2);
    tcase_add_test(tc, a_rank_that_submitted_then_joined_counts_once);
    tcase_add_test(tc, a_rank_that_submitted_its_group_then_joined_counts_once);
    tcase_add_test(tc, a_group_is_compared_when_the_last_rank_joins);
    tcase_add_test(tc, stalls_are_warned_then_failed);
    tcase_add_test(tc, a_rank_one_collective_ahead_is_back_in_step_after_a_stall);
    tcase_add_test(tc, a_stall_debt_lapses_after_the_stall_time);
    tcase_add_test(tc, a_sets_tensors_wait_for_its_members_alone);
    tcase_add_test(tc, a_rank_outside_a_set_and_an_unknown_set_fail_that_rank_alone);
    tcase_add_test(tc, removing_a_set_fails_its_pending_and_held_tensors);
    tcase_add_test(tc, adds_that_name_different_ranks_fail_on_every_rank);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}

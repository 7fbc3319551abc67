/*
 * train_mlp — data-parallel training of a small multilayer perceptron with chorus.
 *
 * A synthetic classification task (inputs and labels generated deterministically from the
 * sample index) is sharded across ranks: each step takes a global batch of GLOBAL_BATCH samples,
 * and each rank computes the gradient of its share. Rank 0's initial weights are broadcast.
 * Backward runs layer by layer from the output; as soon as a layer's gradients are ready they are
 * submitted for an asynchronous allreduce (average) while the next layer's backward runs. The
 * step then waits for all of them and applies SGD.
 *
 * Checks (the program fails if one does not hold):
 *   - rank 0 also trains a single-process copy on the whole global batch, and the distributed
 *     loss must match it within floating-point tolerance at every epoch;
 *   - at the end every rank must hold bit-identical weights (the min and max of a checksum over
 *     ranks agree).
 *
 * Run: mpirun -np 4 ./train_mlp [--epochs N] [--steps N] [--hidden N]
 */
#include <chorus.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FEATURES = 32, CLASSES = 4, GLOBAL_BATCH = 240, SAMPLES = 24000 };

struct model {
    size_t hidden;
    float *w1, *b1, *w2, *b2;        /* w1: hidden x FEATURES, w2: CLASSES x hidden */
    float *gw1, *gb1, *gw2, *gb2;
};

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t a, uint64_t b)
{
    return (float)((mix(a * 0x9e3779b97f4a7c15ull + b) >> 11) * 0x1p-53) * 2.0f - 1.0f;
}

static void sample(size_t index, float *x, int *label)
{
    float best = -INFINITY;
    for (size_t f = 0; f < FEATURES; f++)
        x[f] = uniform(index, f);
    for (int c = 0; c < CLASSES; c++) {
        float score = 0;
        for (size_t f = 0; f < FEATURES; f++)
            score += uniform(1000000 + (uint64_t)c, f) * x[f];
        if (score > best) {
            best = score;
            *label = c;
        }
    }
}

static void model_init(struct model *m, size_t hidden, uint64_t seed)
{
    m->hidden = hidden;
    m->w1 = malloc(hidden * FEATURES * sizeof(float));
    m->b1 = calloc(hidden, sizeof(float));
    m->w2 = malloc(CLASSES * hidden * sizeof(float));
    m->b2 = calloc(CLASSES, sizeof(float));
    m->gw1 = malloc(hidden * FEATURES * sizeof(float));
    m->gb1 = malloc(hidden * sizeof(float));
    m->gw2 = malloc(CLASSES * hidden * sizeof(float));
    m->gb2 = malloc(CLASSES * sizeof(float));
    for (size_t i = 0; i < hidden * FEATURES; i++)
        m->w1[i] = uniform(seed, i) * sqrtf(6.0f / FEATURES);
    for (size_t i = 0; i < CLASSES * hidden; i++)
        m->w2[i] = uniform(seed + 1, i) * sqrtf(6.0f / (float)hidden);
}

static void model_copy(struct model *to, const struct model *from)
{
    memcpy(to->w1, from->w1, from->hidden * FEATURES * sizeof(float));
    memcpy(to->b1, from->b1, from->hidden * sizeof(float));
    memcpy(to->w2, from->w2, CLASSES * from->hidden * sizeof(float));
    memcpy(to->b2, from->b2, CLASSES * sizeof(float));
}

static void model_free(struct model *m)
{
    float *buffers[] = {m->w1, m->b1, m->w2, m->b2, m->gw1, m->gb1, m->gw2, m->gb2};
    for (size_t i = 0; i < 8; i++)
        free(buffers[i]);
}

static chorus_tensor vector(float *data, size_t count)
{
    return (chorus_tensor){.data = data, .dtype = CHORUS_FLOAT32, .ndims = 1,
                           .shape = {(int64_t)count}};
}

/* Forward and backward over samples [first, first + count) of the global batch starting at
 * `batch_start`. Gradients are of the mean loss over these samples. Between the two layers'
 * backward passes it calls `layer2_ready` (the overlap point); returns the summed loss. */
static double forward_backward(struct model *m, size_t batch_start, size_t first, size_t count,
                               void (*layer2_ready)(void *), void *context)
{
    size_t h = m->hidden;
    float *activations = malloc(count * h * sizeof(float));
    float *inputs = malloc(count * FEATURES * sizeof(float));
    float *delta_out = malloc(count * CLASSES * sizeof(float));
    double loss = 0;
    memset(m->gw2, 0, CLASSES * h * sizeof(float));
    memset(m->gb2, 0, CLASSES * sizeof(float));
    memset(m->gw1, 0, h * FEATURES * sizeof(float));
    memset(m->gb1, 0, h * sizeof(float));
    for (size_t s = 0; s < count; s++) {
        int label = 0;
        float *x = inputs + s * FEATURES, *a = activations + s * h;
        sample((batch_start + first + s) % SAMPLES, x, &label);
        for (size_t j = 0; j < h; j++) {
            float z = m->b1[j];
            for (size_t f = 0; f < FEATURES; f++)
                z += m->w1[j * FEATURES + f] * x[f];
            a[j] = z > 0 ? z : 0;
        }
        float logits[CLASSES], largest = -INFINITY, total = 0;
        for (int c = 0; c < CLASSES; c++) {
            logits[c] = m->b2[c];
            for (size_t j = 0; j < h; j++)
                logits[c] += m->w2[c * h + j] * a[j];
            largest = logits[c] > largest ? logits[c] : largest;
        }
        for (int c = 0; c < CLASSES; c++)
            total += expf(logits[c] - largest);
        for (int c = 0; c < CLASSES; c++) {
            float probability = expf(logits[c] - largest) / total;
            delta_out[s * CLASSES + c] = (probability - (c == label)) / (float)count;
        }
        loss += -(double)(logits[label] - largest - logf(total));
    }
    /* Layer 2 gradients first: backward runs from the output. */
    for (size_t s = 0; s < count; s++)
        for (int c = 0; c < CLASSES; c++) {
            float d = delta_out[s * CLASSES + c];
            m->gb2[c] += d;
            for (size_t j = 0; j < h; j++)
                m->gw2[c * h + j] += d * activations[s * h + j];
        }
    if (layer2_ready != NULL)
        layer2_ready(context);
    for (size_t s = 0; s < count; s++)
        for (size_t j = 0; j < h; j++) {
            if (activations[s * h + j] <= 0)
                continue;
            float d = 0;
            for (int c = 0; c < CLASSES; c++)
                d += m->w2[c * h + j] * delta_out[s * CLASSES + c];
            m->gb1[j] += d;
            for (size_t f = 0; f < FEATURES; f++)
                m->gw1[j * FEATURES + f] += d * inputs[s * FEATURES + f];
        }
    free(activations);
    free(inputs);
    free(delta_out);
    return loss;
}

static void sgd(struct model *m, float rate)
{
    size_t h = m->hidden;
    for (size_t i = 0; i < h * FEATURES; i++)
        m->w1[i] -= rate * m->gw1[i];
    for (size_t i = 0; i < h; i++)
        m->b1[i] -= rate * m->gb1[i];
    for (size_t i = 0; i < CLASSES * h; i++)
        m->w2[i] -= rate * m->gw2[i];
    for (size_t i = 0; i < CLASSES; i++)
        m->b2[i] -= rate * m->gb2[i];
}

struct step {
    struct model *model;
    chorus_handle *handles[4];
    int submitted;
    int failed;
};

static void submit(struct step *step, const char *name, float *data, size_t count)
{
    chorus_tensor tensor = vector(data, count);
    if (chorus_allreduce_async(name, &tensor, NULL, CHORUS_AVERAGE,
                               &step->handles[step->submitted]) != CHORUS_OK) {
        fprintf(stderr, "allreduce %s: %s\n", name, chorus_last_error());
        step->failed = 1;
        return;
    }
    step->submitted++;
}

/* Called when layer 2's gradients are final: they travel while layer 1's backward runs. */
static void submit_layer2(void *context)
{
    struct step *step = context;
    submit(step, "fc2.weight", step->model->gw2, CLASSES * step->model->hidden);
    submit(step, "fc2.bias", step->model->gb2, CLASSES);
}

static uint64_t checksum(const struct model *m)
{
    uint64_t hash = 1469598103934665603ull;
    const float *buffers[] = {m->w1, m->b1, m->w2, m->b2};
    size_t counts[] = {m->hidden * FEATURES, m->hidden, CLASSES * m->hidden, CLASSES};
    for (size_t b = 0; b < 4; b++) {
        const unsigned char *bytes = (const unsigned char *)buffers[b];
        for (size_t i = 0; i < counts[b] * sizeof(float); i++)
            hash = (hash ^ bytes[i]) * 1099511628211ull;
    }
    return hash;
}

static int fail(const char *what)
{
    fprintf(stderr, "train_mlp: %s: %s\n", what, chorus_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    int epochs = 5, steps = 20;
    size_t hidden = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--epochs") == 0)
            epochs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--steps") == 0)
            steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--hidden") == 0)
            hidden = (size_t)atoi(argv[i + 1]);
    }
    if (chorus_init(NULL) != CHORUS_OK)
        return fail("chorus_init");
    int rank = chorus_rank(), size = chorus_size();
    if (GLOBAL_BATCH % size != 0) {
        fprintf(stderr, "train_mlp: the global batch (%d) must divide by the ranks (%d)\n",
                GLOBAL_BATCH, size);
        chorus_shutdown();
        return 1;
    }
    size_t local_batch = GLOBAL_BATCH / (size_t)size;
    struct model model, single;
    /* Every rank starts from different weights; rank 0's are broadcast to all. */
    model_init(&model, hidden, 100 + (uint64_t)rank);
    model_init(&single, hidden, 100);
    float *parameters[] = {model.w1, model.b1, model.w2, model.b2};
    size_t counts[] = {hidden * FEATURES, hidden, CLASSES * hidden, CLASSES};
    const char *names[] = {"init.fc1.weight", "init.fc1.bias", "init.fc2.weight",
                           "init.fc2.bias"};
    for (int p = 0; p < 4; p++) {
        chorus_tensor tensor = vector(parameters[p], counts[p]);
        if (chorus_broadcast(names[p], &tensor, 0) != CHORUS_OK)
            return fail("broadcast of the initial weights");
    }
    if (rank == 0) {
        model_copy(&single, &model);
        printf("train_mlp: %d ranks, %zu hidden units, global batch %d (%zu per rank)\n", size,
               hidden, GLOBAL_BATCH, local_batch);
    }
    const float rate = 0.5f;
    int mismatches = 0;
    for (int epoch = 0; epoch < epochs; epoch++) {
        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        double epoch_loss = 0, single_loss = 0;
        for (int s = 0; s < steps; s++) {
            size_t batch_start = (size_t)(epoch * steps + s) * GLOBAL_BATCH;
            struct step step = {.model = &model};
            double local_loss = forward_backward(&model, batch_start, (size_t)rank * local_batch,
                                                 local_batch, submit_layer2, &step);
            submit(&step, "fc1.weight", model.gw1, hidden * FEATURES);
            submit(&step, "fc1.bias", model.gb1, hidden);
            double loss_sum = local_loss;
            chorus_tensor loss = {.data = &loss_sum, .dtype = CHORUS_FLOAT64, .ndims = 0};
            chorus_status status = chorus_allreduce("loss", &loss, NULL, CHORUS_SUM);
            for (int h = 0; h < step.submitted; h++) {
                if (chorus_wait(step.handles[h]) != CHORUS_OK) {
                    fprintf(stderr, "train_mlp: %s\n", chorus_handle_error(step.handles[h]));
                    step.failed = 1;
                }
                chorus_handle_free(step.handles[h]);
            }
            if (step.failed || status != CHORUS_OK)
                return fail("gradient allreduce");
            sgd(&model, rate);
            epoch_loss += loss_sum / GLOBAL_BATCH;
            if (rank == 0) {
                single_loss +=
                    forward_backward(&single, batch_start, 0, GLOBAL_BATCH, NULL, NULL) /
                    GLOBAL_BATCH;
                sgd(&single, rate);
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &end);
        double seconds = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) * 1e-9;
        if (rank == 0) {
            double difference = fabs(epoch_loss - single_loss) / steps;
            bool close = difference <= 1e-4 * (1 + single_loss / steps);
            mismatches += !close;
            printf("epoch %d: loss %.6f (single-process %.6f, %s), %.0f samples/s\n", epoch + 1,
                   epoch_loss / steps, single_loss / steps, close ? "match" : "MISMATCH",
                   (double)steps * GLOBAL_BATCH / seconds);
        }
    }
    /* Identical weights everywhere: the min and max of the checksum over ranks agree. */
    int64_t sums[2] = {(int64_t)(checksum(&model) >> 1), (int64_t)(checksum(&model) >> 1)};
    chorus_tensor low = {.data = &sums[0], .dtype = CHORUS_INT64, .ndims = 0};
    chorus_tensor high = {.data = &sums[1], .dtype = CHORUS_INT64, .ndims = 0};
    if (chorus_allreduce("checksum.min", &low, NULL, CHORUS_MIN) != CHORUS_OK ||
        chorus_allreduce("checksum.max", &high, NULL, CHORUS_MAX) != CHORUS_OK)
        return fail("checksum allreduce");
    int mismatch_total = mismatches;
    chorus_tensor verdict = {.data = &mismatch_total, .dtype = CHORUS_INT32, .ndims = 0};
    if (chorus_broadcast("verdict", &verdict, 0) != CHORUS_OK)
        return fail("verdict broadcast");
    bool identical = sums[0] == sums[1];
    if (rank == 0)
        printf("final weights %s on all %d ranks (checksum %016llx); loss curve %s "
               "single-process training\n",
               identical ? "identical" : "DIFFERENT", size, (unsigned long long)sums[0],
               mismatch_total == 0 ? "matches" : "does NOT match");
    model_free(&model);
    model_free(&single);
    chorus_shutdown();
    return identical && mismatch_total == 0 ? 0 : 1;
}

/*
 * mpi_topology.c — what init reports: rank, size, local and cross ranks against what the
 * launcher says (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE / _NODE_RANK, Hydra's
 * MPI_LOCALRANKID / MPI_LOCALNRANKS), cores from hwloc; then chorus
 * on a communicator of the even ranks only (chorus_init_comm), and a bad parameter on one rank
 * failing init on every rank with the variable and the value named.
 */
#include "mpi_test.h"

static int environment_int(const char *name)
{
    const char *value = getenv(name);
    return value ? atoi(value) : -1;
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 60);
    test_step = "init";
    test_init_chorus();
    chorus_topology topology = CHORUS_TOPOLOGY_INIT;
    EXPECT_STATUS(chorus_get_topology(&topology), CHORUS_OK);
    EXPECT(topology.rank == test_rank && chorus_rank() == test_rank, "rank %d", topology.rank);
    EXPECT(topology.size == test_size && chorus_size() == test_size, "size %d", topology.size);
    int local_rank = environment_int("OMPI_COMM_WORLD_LOCAL_RANK");
    int local_size = environment_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    int node_rank = environment_int("OMPI_COMM_WORLD_NODE_RANK");
    if (local_rank < 0) { /* Hydra (MPICH, Intel MPI, MVAPICH): no node rank */
        local_rank = node_rank = environment_int("MPI_LOCALRANKID");
        local_size = environment_int("MPI_LOCALNRANKS");
    }
    if (local_rank >= 0) {
        EXPECT(chorus_local_rank() == local_rank, "local rank %d, the launcher says %d",
               chorus_local_rank(), local_rank);
        EXPECT(chorus_local_size() == local_size, "local size %d, the launcher says %d",
               chorus_local_size(), local_size);
        EXPECT(node_rank == local_rank, "node rank %d", node_rank);
    }
    int hosts = 0, first_on_host = chorus_local_rank() == 0;
    MPI_Allreduce(&first_on_host, &hosts, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    EXPECT(chorus_cross_size() == hosts, "cross size %d, hosts %d", chorus_cross_size(), hosts);
    EXPECT(chorus_cross_rank() >= 0 && chorus_cross_rank() < hosts, "cross rank %d",
           chorus_cross_rank());
    EXPECT(topology.cores >= 1 && topology.pus >= topology.cores && topology.numa_nodes >= 1,
           "cores %zu, pus %zu, numa %zu", topology.cores, topology.pus, topology.numa_nodes);
    EXPECT(topology.homogeneous, "one host is homogeneous");
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);

    test_step = "init on a sub-communicator";
    MPI_Comm evens;
    MPI_Comm_split(MPI_COMM_WORLD, test_rank % 2, test_rank, &evens);
    if (test_rank % 2 == 0) {
        EXPECT_STATUS(chorus_init_comm(evens, NULL), CHORUS_OK);
        int expected_size = (test_size + 1) / 2;
        EXPECT(chorus_size() == expected_size && chorus_rank() == test_rank / 2,
               "sub-communicator rank %d of %d", chorus_rank(), chorus_size());
        float value = (float)test_rank;
        chorus_tensor tensor = {.data = &value, .dtype = CHORUS_FLOAT32, .ndims = 1,
                                .shape = {1}};
        EXPECT_STATUS(chorus_allreduce("evens", &tensor, NULL, CHORUS_SUM), CHORUS_OK);
        float expected = 0;
        for (int r = 0; r < test_size; r += 2)
            expected += (float)r;
        EXPECT(value == expected, "sum over even ranks %g, expected %g", (double)value,
               (double)expected);
        EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    }
    MPI_Comm_free(&evens);

    test_step = "a bad parameter on the last rank";
    int bad = test_size - 1;
    if (test_rank == bad)
        setenv("CHORUS_FUSION_THRESHOLD", "lots", 1);
    chorus_status status = chorus_init(NULL);
    EXPECT_STATUS(status, CHORUS_ERR_BAD_PARAMETER);
    EXPECT(strstr(chorus_last_error(), "CHORUS_FUSION_THRESHOLD") != NULL &&
               strstr(chorus_last_error(), "\"lots\"") != NULL,
           "message: %s", chorus_last_error());
    if (test_rank != bad) {
        char expected[32];
        snprintf(expected, sizeof expected, "rank %d:", bad);
        EXPECT(strstr(chorus_last_error(), expected) != NULL, "names the rank: %s",
               chorus_last_error());
    }
    EXPECT(!chorus_is_initialized(), "failed init leaves chorus uninitialized");
    unsetenv("CHORUS_FUSION_THRESHOLD");
    test_step = "init after a failed init";
    EXPECT_STATUS(chorus_init(NULL), CHORUS_OK);
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_topology");
}

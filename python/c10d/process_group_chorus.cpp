// process_group_chorus.cpp — chorus as a torch.distributed backend: a c10d::ProcessGroup whose
// collectives are chorus's ordered operations (CHORUS_OP_ORDERED), so that every rank's N-th
// call of a group runs with the N-th of every other member, with no negotiation.
//
// Why C++ and not a ProcessGroup subclass in Python: torch 1.13's C++ callers (DDP's reducer,
// _verify_params_across_processes, the communication hooks) call Work::wait and
// Work::getFuture on the C++ object, which a Python subclass cannot override; and a blocking
// dist.all_reduce through Python costs tens of microseconds of interpreter time per call.
//
// Completion: Work::wait() waits on the chorus handle itself (no other thread between the
// background thread and the caller). A Work whose future is asked for (DDP, hooks) is also
// handed to a completion thread (class Completer), which waits and completes the future. Either
// thread may finish an operation first: its last step (copies into the caller's outputs) runs
// once, under the operation's own mutex (std::call_once, in this libstdc++, takes a mutex of the
// whole process and thread-local storage on every call: a fifth of the backend's own cost of a
// small dist.all_reduce).
//
// Headers: ATen and torch's pybind glue, not <torch/extension.h>, which adds the whole C++
// frontend (torch/all.h: nn, optim, data, jit) that nothing here uses; it was 40% of this
// file's compile time, which every build and every pip install pays.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <chorus.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

// One submitted chorus operation and what follows it.
struct Operation {
    chorus_handle *handle = nullptr;     // nullptr: nothing to run (an empty group's no-op)
    std::function<void(Operation &)> finish; // after success: copies into the outputs
    std::vector<at::Tensor> outputs;     // the future's value
    std::vector<at::Tensor> keep_alive;  // buffers chorus reads or writes until completion, but
                                         // the outputs
    std::mutex once;                     // held while the operation completes

    chorus_status status = CHORUS_IN_PROGRESS;
    std::string error;
    int source = -1;                     // a receive's sender, as the group numbers it
    std::atomic<bool> done{false};

    ~Operation() { chorus_handle_free(handle); }

    // Waits for the handle and runs `finish`, once, whichever thread comes first.
    void complete() {
        if (done.load())
            return;
        std::lock_guard<std::mutex> lock(once);
        if (done.load())
            return;
        status = handle != nullptr ? chorus_wait(handle) : CHORUS_OK;
        if (status != CHORUS_OK) {
            error = std::string("chorus backend: ") + chorus_status_name(status) + ": " +
                    chorus_handle_error(handle);
        } else if (finish) {
            try {
                finish(*this);
            } catch (const std::exception &failure) {
                status = CHORUS_ERR_INTERNAL;
                error = std::string("chorus backend: ") + failure.what();
            }
        }
        done.store(true);
    }
};

// The threads that complete the futures that were asked for (and keep the operations of Work
// objects dropped before they completed until they have). A future's callbacks run on the
// thread that completes it, and may wait for a later future (PowerSGD's hook does): so a new
// thread starts whenever none is idle, that no callback waits behind a busy one, up to
// kMaxThreads; past that, operations wait in the queue for a thread to come free. The bound is
// far above what hooks nest (a callback waiting for one later future, and DDP's buckets in
// flight: tens), and keeps a runaway of asynchronous operations from starting a thread each.
// The threads live as long as the process: they may still wait on chorus while it exits.
class Completer {
  public:
    static constexpr size_t kMaxThreads = 64;

    static Completer &instance() {
        // Never destroyed: its threads may still wait while the process exits.
        static Completer *completer = new Completer();
        return *completer;
    }

    void add(std::shared_ptr<Operation> operation,
             c10::intrusive_ptr<c10::ivalue::Future> future) {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.emplace_back(std::move(operation), std::move(future));
        if (idle_ == 0 && threads_.size() < kMaxThreads)
            threads_.emplace_back(&Completer::run, this);
        else
            ready_.notify_one();
    }

  private:
    void run() {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            idle_++;
            ready_.wait(lock, [this] { return !queue_.empty(); });
            idle_--;
            auto item = std::move(queue_.front());
            queue_.pop_front();
            lock.unlock();
            item.first->complete();
            if (!item.second) {
                // Kept only for its buffers: nobody asked for its future.
            } else if (item.first->status == CHORUS_OK)
                item.second->markCompleted(c10::IValue(item.first->outputs));
            else
                item.second->setError(
                    std::make_exception_ptr(std::runtime_error(item.first->error)));
            item = {};
            lock.lock();
        }
    }

    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<std::pair<std::shared_ptr<Operation>, c10::intrusive_ptr<c10::ivalue::Future>>>
        queue_;
    std::vector<std::thread> threads_; // at most kMaxThreads, each running run() for good
    size_t idle_ = 0;
};

class WorkChorus : public c10d::Work {
  public:
    WorkChorus(std::shared_ptr<Operation> operation, int rank, c10d::OpType type)
        : c10d::Work(rank, type), operation_(std::move(operation)) {}

    // A Work dropped while its operation runs (DDP drops the one of its join check) leaves the
    // operation, with the buffers chorus still writes, to a completion thread.
    ~WorkChorus() override {
        if (!operation_->done.load() && !future_)
            Completer::instance().add(operation_, {});
    }

    bool isCompleted() override {
        if (operation_->done.load())
            return true;
        if (operation_->handle != nullptr && chorus_test(operation_->handle) == CHORUS_IN_PROGRESS)
            return false;
        operation_->complete();
        return true;
    }

    bool isSuccess() const override {
        return operation_->done.load() && operation_->status == CHORUS_OK;
    }

    std::exception_ptr exception() const override {
        if (!operation_->done.load() || operation_->status == CHORUS_OK)
            return nullptr;
        return std::make_exception_ptr(std::runtime_error(operation_->error));
    }

    bool wait(std::chrono::milliseconds /* timeout: CHORUS_TIMEOUT_SECONDS bounds it */) override {
        operation_->complete();
        if (operation_->status != CHORUS_OK)
            throw std::runtime_error(operation_->error);
        return true;
    }

    // Whether the operation has completed (wait() would not block).
    bool completed() const { return operation_->done.load(); }

    std::vector<at::Tensor> result() override {
        operation_->complete();
        return operation_->outputs;
    }

    void synchronize() override {}

    // The group rank whose message a receive took (recvAnysource's answer).
    int sourceRank() const override {
        TORCH_CHECK(operation_->done.load() && operation_->status == CHORUS_OK,
                    "chorus backend: sourceRank of a receive that has not completed");
        return operation_->source;
    }

    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!future_) {
            future_ = c10::make_intrusive<c10::ivalue::Future>(
                c10::ListType::create(c10::TensorType::get()));
            Completer::instance().add(operation_, future_);
        }
        return future_;
    }

  private:
    std::shared_ptr<Operation> operation_;
    std::mutex mutex_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

chorus_dtype dtype_of(const at::Tensor &tensor) {
    switch (tensor.scalar_type()) {
    case at::kFloat: return CHORUS_FLOAT32;
    case at::kDouble: return CHORUS_FLOAT64;
    case at::kHalf: return CHORUS_FLOAT16;
    case at::kBFloat16: return CHORUS_BFLOAT16;
    case at::kInt: return CHORUS_INT32;
    case at::kLong: return CHORUS_INT64;
    case at::kShort: return CHORUS_INT16;
    case at::kChar: return CHORUS_INT8;
    case at::kByte: return CHORUS_UINT8;
    case at::kBool: return CHORUS_BOOL;
    default:
        TORCH_CHECK(false, "chorus backend: tensors of dtype ", tensor.scalar_type(),
                    " are not supported (float32, float64, float16, bfloat16, int8-64, uint8, "
                    "bool are)");
    }
}

chorus_op op_of(const c10d::ReduceOp &op, const char *call) {
    switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM: return CHORUS_SUM;
    case c10d::ReduceOp::AVG: return CHORUS_AVERAGE;
    case c10d::ReduceOp::PRODUCT: return CHORUS_PRODUCT;
    case c10d::ReduceOp::MIN: return CHORUS_MIN;
    case c10d::ReduceOp::MAX: return CHORUS_MAX;
    default:
        TORCH_CHECK(false, "chorus backend: ", call, " with ReduceOp ",
                    static_cast<int>(static_cast<c10d::ReduceOp::RedOpType>(op)),
                    " (BAND, BOR, BXOR or PREMUL_SUM) is not supported: chorus reduces with "
                    "SUM, AVG, PRODUCT, MIN and MAX");
    }
}

void check_cpu(const at::Tensor &tensor, const char *call) {
    TORCH_CHECK(tensor.device().is_cpu(), "chorus backend: ", call,
                " of a tensor on ", tensor.device(),
                ": this backend takes CPU tensors (use the nccl backend for CUDA tensors)");
    dtype_of(tensor);
}

void check_single(const std::vector<at::Tensor> &tensors, const char *call) {
    TORCH_CHECK(tensors.size() == 1, "chorus backend: ", call,
                " takes one tensor per process, not ", tensors.size());
    check_cpu(tensors[0], call);
}

// A one-dimensional chorus tensor over `tensor`'s elements (contiguous).
chorus_tensor flat(const at::Tensor &tensor) {
    chorus_tensor described{};
    described.data = tensor.data_ptr();
    described.dtype = dtype_of(tensor);
    described.ndims = 1;
    described.shape[0] = tensor.numel();
    return described;
}

class ProcessGroupChorus : public c10d::ProcessGroup {
  public:
    ProcessGroupChorus(int rank, int size, int process_set, std::vector<int64_t> job_ranks,
                       double timeout_seconds)
        : c10d::ProcessGroup(rank, size), process_set_(process_set),
          job_ranks_(std::move(job_ranks)), timeout_seconds_(timeout_seconds) {
        std::lock_guard<std::mutex> lock(monitored_lock());
        generation_ = ++monitored_transfers(process_set_).groups_made;
    }

    const std::string getBackendName() const override { return "chorus"; }

    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override {
        TORCH_CHECK(tensors.size() == 1, "chorus backend: allreduce takes one tensor per "
                                         "process, not ", tensors.size());
        if (tensors[0].is_sparse())
            return sparse_allreduce(tensors[0], op_of(opts.reduceOp, "allreduce"));
        check_single(tensors, "allreduce");
        return reduce_in_place(tensors[0], op_of(opts.reduceOp, "allreduce"), -1,
                               c10d::OpType::ALLREDUCE);
    }

    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
        std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) override {
        TORCH_CHECK(!tensors.empty(), "chorus backend: allreduce_coalesced of no tensors");
        for (auto &tensor : tensors) {
            check_cpu(tensor, "allreduce_coalesced");
            TORCH_CHECK(tensor.scalar_type() == tensors[0].scalar_type(),
                        "chorus backend: allreduce_coalesced of tensors of different dtypes");
        }
        std::vector<at::Tensor> flats;
        for (auto &tensor : tensors)
            flats.push_back(tensor.reshape({-1}));
        at::Tensor packed = at::cat(flats);
        auto operation = std::make_shared<Operation>();
        operation->keep_alive = {packed};
        operation->outputs = tensors;
        operation->finish = [packed](Operation &done) {
            int64_t at = 0;
            for (auto &tensor : done.outputs) {
                tensor.copy_(packed.narrow(0, at, tensor.numel()).view_as(tensor));
                at += tensor.numel();
            }
        };
        chorus_op_args args = base_args(CHORUS_ALLREDUCE, flat(packed));
        args.op = op_of(opts.reduceOp, "allreduce_coalesced");
        return submit(args, operation, c10d::OpType::ALLREDUCE_COALESCED);
    }

    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                          const c10d::ReduceOptions &opts) override {
        check_single(tensors, "reduce");
        return reduce_in_place(tensors[0], op_of(opts.reduceOp, "reduce"),
                               static_cast<int>(opts.rootRank), c10d::OpType::REDUCE);
    }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override {
        check_single(tensors, "broadcast");
        check_root(opts.rootRank, "broadcast");
        at::Tensor tensor = tensors[0];
        at::Tensor buffer = tensor.contiguous();
        auto operation = std::make_shared<Operation>();
        operation->outputs = {tensor};
        operation->keep_alive = {buffer};
        if (!buffer.is_same(tensor))
            operation->finish = [tensor, buffer](Operation &) mutable { tensor.copy_(buffer); };
        chorus_op_args args = base_args(CHORUS_BROADCAST, flat(buffer));
        args.root = static_cast<int>(job_ranks_[opts.rootRank]);
        return submit(args, operation, c10d::OpType::BROADCAST);
    }

    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &) override {
        check_single(inputs, "allgather");
        TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                    "chorus backend: allgather needs one list of ", getSize(),
                    " output tensors");
        for (auto &output : outputs[0])
            TORCH_CHECK(output.numel() == inputs[0].numel() &&
                            output.scalar_type() == inputs[0].scalar_type(),
                        "chorus backend: allgather's output tensors must have the input's size "
                        "and dtype");
        return allgather_into(inputs[0], outputs[0], c10d::OpType::ALLGATHER);
    }

    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &) override {
        check_cpu(input, "_allgather_base");
        TORCH_CHECK(output.numel() == input.numel() * getSize() &&
                        output.scalar_type() == input.scalar_type(),
                    "chorus backend: _allgather_base's output must hold ", getSize(),
                    " times the input's elements, of its dtype");
        return allgather_into(input, {output}, c10d::OpType::_ALLGATHER_BASE);
    }

    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::GatherOptions &opts) override {
        check_single(inputs, "gather");
        check_root(opts.rootRank, "gather");
        bool root = getRank() == opts.rootRank;
        TORCH_CHECK(root ? outputs.size() == 1 &&
                               static_cast<int>(outputs[0].size()) == getSize()
                         : outputs.empty() || outputs[0].empty(),
                    "chorus backend: gather needs ", getSize(),
                    " output tensors on the root and none elsewhere");
        // An allgather of which only the root keeps the result.
        return allgather_into(inputs[0], root ? outputs[0] : std::vector<at::Tensor>{},
                              c10d::OpType::GATHER);
    }

    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                           std::vector<std::vector<at::Tensor>> &inputs,
                                           const c10d::ScatterOptions &opts) override {
        check_single(outputs, "scatter");
        check_root(opts.rootRank, "scatter");
        bool root = getRank() == opts.rootRank;
        TORCH_CHECK(root ? inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize()
                         : inputs.empty() || inputs[0].empty(),
                    "chorus backend: scatter needs ", getSize(),
                    " input tensors on the root and none elsewhere");
        // An alltoall in which the root alone sends: each rank its piece.
        at::Tensor output = outputs[0];
        int64_t piece = output.numel();
        std::vector<int64_t> splits(getSize(), 0);
        at::Tensor send;
        if (root) {
            std::vector<at::Tensor> flats;
            for (auto &tensor : inputs[0]) {
                TORCH_CHECK(tensor.numel() == piece, "chorus backend: scatter's inputs must "
                                                     "have the output's size");
                flats.push_back(tensor.reshape({-1}));
            }
            send = at::cat(flats);
            std::fill(splits.begin(), splits.end(), piece);
        } else {
            send = at::empty({0}, output.options());
        }
        return alltoall_rows(send, splits, output, c10d::OpType::SCATTER);
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter(
        std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
        const c10d::ReduceScatterOptions &opts) override {
        check_single(outputs, "reduce_scatter");
        TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                    "chorus backend: reduce_scatter needs one list of ", getSize(),
                    " input tensors");
        std::vector<at::Tensor> flats;
        for (auto &tensor : inputs[0]) {
            TORCH_CHECK(tensor.numel() == outputs[0].numel(),
                        "chorus backend: reduce_scatter's inputs must have the output's size");
            flats.push_back(tensor.reshape({-1}));
        }
        return reduce_scatter_rows(at::cat(flats), outputs[0],
                                   op_of(opts.reduceOp, "reduce_scatter"),
                                   c10d::OpType::REDUCE_SCATTER);
    }

    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
        at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) override {
        check_cpu(input, "_reduce_scatter_base");
        TORCH_CHECK(input.numel() == output.numel() * getSize(),
                    "chorus backend: _reduce_scatter_base's input must hold ", getSize(),
                    " times the output's elements");
        return reduce_scatter_rows(input.contiguous(), output,
                                   op_of(opts.reduceOp, "_reduce_scatter_base"),
                                   c10d::OpType::_REDUCE_SCATTER_BASE);
    }

    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                                 std::vector<int64_t> &output_splits,
                                                 std::vector<int64_t> &input_splits,
                                                 const c10d::AllToAllOptions &) override {
        check_cpu(input, "alltoall_base");
        int64_t rows = input.dim() > 0 ? input.size(0) : input.numel();
        std::vector<int64_t> splits(input_splits.begin(), input_splits.end());
        if (splits.empty()) {
            TORCH_CHECK(rows % getSize() == 0, "chorus backend: all_to_all_single: ", rows,
                        " rows do not split evenly over ", getSize(), " ranks");
            splits.assign(getSize(), rows / getSize());
        }
        TORCH_CHECK(static_cast<int>(splits.size()) == getSize(),
                    "chorus backend: all_to_all_single needs one input split per rank");
        int64_t row = rows > 0 ? input.numel() / rows : 1;
        for (auto &split : splits)
            split *= row;
        (void)output_splits; // what arrives is what the others send: checked by its size
        return alltoall_rows(input.contiguous().reshape({-1}), splits, output,
                             c10d::OpType::ALLTOALL_BASE);
    }

    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const c10d::AllToAllOptions &) override {
        TORCH_CHECK(static_cast<int>(inputs.size()) == getSize() &&
                        static_cast<int>(outputs.size()) == getSize(),
                    "chorus backend: all_to_all needs ", getSize(), " inputs and outputs");
        std::vector<at::Tensor> flats;
        std::vector<int64_t> splits;
        for (auto &tensor : inputs) {
            check_cpu(tensor, "all_to_all");
            flats.push_back(tensor.reshape({-1}));
            splits.push_back(tensor.numel());
        }
        at::Tensor send = at::cat(flats);
        auto operation = std::make_shared<Operation>();
        operation->outputs = outputs;
        operation->keep_alive = {send};
        operation->finish = [](Operation &done) {
            chorus_tensor received{};
            chorus_handle_output(done.handle, &received);
            std::vector<int64_t> counts(done.outputs.size());
            chorus_handle_received_splits(done.handle, counts.data(), counts.size());
            const char *at = static_cast<const char *>(received.data);
            for (size_t r = 0; r < done.outputs.size(); r++) {
                at::Tensor &out = done.outputs[r];
                TORCH_CHECK(counts[r] == out.numel(), "all_to_all: rank ", r, " sent ",
                            counts[r], " elements where output ", r, " holds ", out.numel());
                size_t bytes = counts[r] * out.element_size();
                copy_bytes_into(out, at, bytes);
                at += bytes;
            }
        };
        chorus_op_args args = base_args(CHORUS_ALLTOALL, flat(send));
        args.splits = splits.data();
        return submit(args, operation, c10d::OpType::ALLTOALL);
    }

    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override {
        at::Tensor token = at::zeros({1}, at::kInt);
        auto operation = std::make_shared<Operation>();
        operation->keep_alive = {token};
        chorus_op_args args = base_args(CHORUS_ALLREDUCE, flat(token));
        args.name = "barrier";
        return submit(args, operation, c10d::OpType::BARRIER);
    }

    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int destination,
                                        int tag) override {
        check_single(tensors, "send");
        check_root(destination, "send");
        check_tag(tag, "send");
        at::Tensor buffer = tensors[0].contiguous();
        auto operation = std::make_shared<Operation>();
        operation->keep_alive = {buffer};
        chorus_tensor described = flat(buffer);
        chorus_status status =
            chorus_send_async(&described, static_cast<int>(job_ranks_[destination]), tag,
                              process_set_, &operation->handle);
        TORCH_CHECK(status == CHORUS_OK, "chorus backend: send: ", chorus_status_name(status),
                    ": ", chorus_last_error());
        return c10::make_intrusive<WorkChorus>(std::move(operation), getRank(),
                                               c10d::OpType::SEND);
    }

    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int source,
                                        int tag) override {
        check_single(tensors, "recv");
        check_root(source, "recv");
        check_tag(tag, "recv");
        return receive(tensors[0], static_cast<int>(job_ranks_[source]), tag,
                       c10d::OpType::RECV);
    }

    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors,
                                                 int tag) override {
        check_single(tensors, "recv");
        check_tag(tag, "recv");
        return receive(tensors[0], CHORUS_ANY_SOURCE, tag, c10d::OpType::RECVANYSOURCE);
    }

    // Every rank's tensors, each rank's packed into one buffer of bytes (the ranks' inputs have
    // the same sizes and dtypes, as torch requires), gathered by one allgather and cut apart.
    c10::intrusive_ptr<c10d::Work> allgather_coalesced(
        std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
        const c10d::AllgatherOptions &) override {
        TORCH_CHECK(static_cast<int>(outputs.size()) == getSize(),
                    "chorus backend: allgather_coalesced needs one list of outputs per rank (",
                    getSize(), "), not ", outputs.size());
        std::vector<at::Tensor> bytes;
        for (auto &input : inputs) {
            TORCH_CHECK(input.device().is_cpu(), "chorus backend: allgather_coalesced of a "
                                                 "tensor on ", input.device());
            bytes.push_back(as_bytes(input.contiguous()));
        }
        for (auto &list : outputs) {
            TORCH_CHECK(list.size() == inputs.size(),
                        "chorus backend: allgather_coalesced needs as many outputs per rank as "
                        "inputs (", inputs.size(), ")");
            for (size_t i = 0; i < list.size(); i++)
                TORCH_CHECK(list[i].numel() == inputs[i].numel() &&
                                list[i].scalar_type() == inputs[i].scalar_type(),
                            "chorus backend: allgather_coalesced's output ", i,
                            " must have input ", i, "'s size and dtype");
        }
        at::Tensor packed = bytes.empty() ? at::empty({0}, at::kByte) : at::cat(bytes);
        std::vector<at::Tensor> flat_outputs;
        for (auto &list : outputs)
            for (auto &output : list)
                flat_outputs.push_back(output);
        auto operation = std::make_shared<Operation>();
        operation->outputs = flat_outputs;
        operation->keep_alive = {packed};
        operation->finish = copy_output_in_order;
        return submit(base_args(CHORUS_ALLGATHER, flat(packed)), operation,
                      c10d::OpType::ALLGATHER_COALESCED);
    }

    // gloo's monitored barrier, over chorus's transfers: every other rank tells group rank 0
    // that it arrived and waits for rank 0's answer; rank 0 waits for them in rank order, up to
    // the timeout, and names the first that did not arrive (all of them with waitAllRanks).
    // The messages have one tag (kMonitoredTag). A receive given up on stays posted and serves
    // the next call, so that no message is lost to it: a rank that missed a call and comes to
    // the next is seen arriving there. They are kept per process set, not per group object: a
    // group made again over the same set (the default group, after destroy_process_group) takes
    // them over, as its messages would otherwise land in them.
    void monitoredBarrier(const c10d::BarrierOptions &opts, bool wait_all_ranks) override {
        std::lock_guard<std::mutex> lock(monitored_lock());
        MonitoredTransfers &kept = monitored_transfers(process_set_);
        using clock = std::chrono::steady_clock;
        auto timeout = opts.timeout == c10d::kUnsetTimeout ? std::chrono::milliseconds(1800000)
                                                           : opts.timeout;
        auto deadline = clock::now() + timeout;
        long long ms = static_cast<long long>(timeout.count());
        prune_sends(kept.sends);
        if (getRank() != 0) {
            kept.sends.push_back(transfer_token(true, 0));
            if (!kept.answer)
                kept.answer = transfer_token(false, 0);
            bool answered = receive_until(kept.answer, 0, deadline);
            if (answered)
                kept.answer.reset();
            TORCH_CHECK(answered, "Rank ", getRank(), " successfully reached monitoredBarrier, "
                        "but received errors while waiting for send/recv from rank 0 (chorus: "
                        "no answer within ", ms, " ms; rank 0's error names the rank that did "
                        "not arrive)");
            return;
        }
        kept.arrivals.resize(getSize());
        for (int r = 1; r < getSize(); r++)
            if (!kept.arrivals[r])
                kept.arrivals[r] = transfer_token(false, r);
        std::vector<int> missing;
        for (int r = 1; r < getSize(); r++) {
            if (!wait_all_ranks && clock::now() >= deadline)
                TORCH_CHECK(false, "Rank 0 timed out in monitoredBarrier after ", ms,
                            " ms (ranks ", r, " and above not yet seen)");
            if (receive_until(kept.arrivals[r], r, deadline)) {
                kept.arrivals[r].reset();
                continue;
            }
            TORCH_CHECK(wait_all_ranks, "Rank ", r, " failed to pass monitoredBarrier in ", ms,
                        " ms");
            missing.push_back(r);
        }
        if (!missing.empty()) {
            std::string ranks;
            for (size_t i = 0; i < missing.size(); i++)
                ranks += (i > 0 ? ", " : "") + std::to_string(missing[i]);
            TORCH_CHECK(false, "Ranks ", ranks, " failed to pass monitoredBarrier in ", ms,
                        " ms");
        }
        for (int r = 1; r < getSize(); r++)
            kept.sends.push_back(transfer_token(true, r));
    }

  private:
    // The tag of monitored barriers' messages: not for send and recv on a chorus group.
    static constexpr int kMonitoredTag = 32767;

    // A one-int transfer of a monitored barrier. Its buffer lives on the heap and is let go
    // only once the transfer completed: one given up on may still be written.
    struct Token {
        chorus_handle *handle = nullptr;
        int32_t *word = new int32_t(0);
        bool done = false;
        ~Token() {
            if (handle != nullptr && !done)
                chorus_handle_free(handle); // freed by chorus when it completes; the word stays
            else {
                chorus_handle_free(handle);
                delete word;
            }
        }
    };

    std::shared_ptr<Token> transfer_token(bool send, int group_rank) {
        auto token = std::make_shared<Token>();
        *token->word = send ? generation_ : 0;
        chorus_tensor described{};
        described.data = token->word;
        described.dtype = CHORUS_INT32;
        described.ndims = 1;
        described.shape[0] = 1;
        int peer = static_cast<int>(job_ranks_[group_rank]);
        chorus_status status =
            send ? chorus_send_async(&described, peer, kMonitoredTag, process_set_,
                                     &token->handle)
                 : chorus_recv_async(&described, peer, kMonitoredTag, process_set_,
                                     &token->handle);
        TORCH_CHECK(status == CHORUS_OK, "chorus backend: monitoredBarrier: ",
                    chorus_status_name(status), ": ", chorus_last_error());
        return token;
    }

    // Whether the receive from `group_rank` in `token` brought this group's message by
    // `deadline`: one of an earlier group over the same set (a rank that came late to its
    // barrier) is dropped and the receive posted again.
    bool receive_until(std::shared_ptr<Token> &token, int group_rank,
                       std::chrono::steady_clock::time_point deadline) {
        for (;;) {
            if (!wait_until(token, deadline))
                return false;
            if (*token->word == generation_)
                return true;
            token = transfer_token(false, group_rank);
        }
    }

    // Whether the token's transfer completed successfully by `deadline` (polled: chorus's
    // handles have no timed wait).
    static bool wait_until(const std::shared_ptr<Token> &token,
                           std::chrono::steady_clock::time_point deadline) {
        for (;;) {
            chorus_status status = chorus_test(token->handle);
            if (status != CHORUS_IN_PROGRESS) {
                token->done = true;
                return status == CHORUS_OK;
            }
            if (std::chrono::steady_clock::now() >= deadline)
                return false;
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    }

    // Drops the sends of earlier monitored barriers that have completed.
    static void prune_sends(std::vector<std::shared_ptr<Token>> &sends) {
        std::vector<std::shared_ptr<Token>> pending;
        for (auto &token : sends) {
            if (chorus_test(token->handle) == CHORUS_IN_PROGRESS)
                pending.push_back(token);
            else
                token->done = true;
        }
        sends = std::move(pending);
    }

    // monitoredBarrier's transfers kept between calls, per process set: rank 0's receives from
    // each rank, the others' receive of rank 0's answer, sends not yet completed.
    struct MonitoredTransfers {
        int groups_made = 0; // groups made over the set so far: a group's messages carry its
                             // number, alike on every member, as all make their groups in turn
        std::vector<std::shared_ptr<Token>> arrivals;
        std::shared_ptr<Token> answer;
        std::vector<std::shared_ptr<Token>> sends;
    };

    // Those of process set `process_set`. Never destroyed: at exit, chorus may be gone.
    static MonitoredTransfers &monitored_transfers(int process_set) {
        static auto *kept = new std::map<int, MonitoredTransfers>();
        return (*kept)[process_set];
    }

    static std::mutex &monitored_lock() {
        static auto *lock = new std::mutex();
        return *lock;
    }

    static void check_tag(int tag, const char *call) {
        TORCH_CHECK(tag < kMonitoredTag, "chorus backend: ", call, " with tag ", tag, ": tag ",
                    kMonitoredTag, " is monitored_barrier's on a chorus group");
    }

    // A sparse (COO) allreduce, as gloo's: every rank's indices and values gathered (two
    // allgathers of as many rows as each rank has entries), summed where indices repeat, and the
    // sum written into `tensor`. Completes before it returns.
    c10::intrusive_ptr<c10d::Work> sparse_allreduce(at::Tensor tensor, chorus_op op) {
        TORCH_CHECK(op == CHORUS_SUM, "chorus backend: allreduce of a sparse tensor takes SUM "
                                      "only (as gloo)");
        TORCH_CHECK(tensor.device().is_cpu(), "chorus backend: allreduce of a sparse tensor on ",
                    tensor.device());
        at::Tensor input = tensor.coalesce();
        at::Tensor indices = gather_rows(input._indices().t().contiguous());
        at::Tensor values = gather_rows(input._values().contiguous());
        at::Tensor sum =
            at::sparse_coo_tensor(indices.t(), values, input.sizes(), input.options())
                .coalesce();
        tensor.copy_(sum);
        auto operation = std::make_shared<Operation>();
        operation->outputs = {tensor};
        operation->complete();
        return c10::make_intrusive<WorkChorus>(std::move(operation), getRank(),
                                               c10d::OpType::ALLREDUCE);
    }

    // Every member's `rows` (contiguous, the first dimension counting rows, which may differ
    // between members) one after the other, by an allgather waited for here.
    at::Tensor gather_rows(const at::Tensor &rows) {
        chorus_tensor described{};
        described.data = rows.data_ptr();
        described.dtype = dtype_of(rows);
        described.ndims = static_cast<size_t>(rows.dim());
        for (int64_t d = 0; d < rows.dim(); d++)
            described.shape[d] = rows.size(d);
        chorus_op_args args = base_args(CHORUS_ALLGATHER, described);
        chorus_handle *handle = nullptr;
        chorus_status status = chorus_submit(&args, &handle);
        TORCH_CHECK(status == CHORUS_OK, "chorus backend: ", chorus_status_name(status), ": ",
                    chorus_last_error());
        status = chorus_wait(handle);
        std::string error = status == CHORUS_OK ? "" : chorus_handle_error(handle);
        chorus_tensor gathered{};
        if (status == CHORUS_OK)
            chorus_handle_output(handle, &gathered);
        std::vector<int64_t> shape(rows.sizes().begin(), rows.sizes().end());
        shape[0] = status == CHORUS_OK ? gathered.shape[0] : 0;
        at::Tensor result = at::empty(shape, rows.options());
        if (status == CHORUS_OK && result.numel() > 0)
            std::memcpy(result.data_ptr(), gathered.data, result.numel() * result.element_size());
        chorus_handle_free(handle);
        TORCH_CHECK(status == CHORUS_OK, "chorus backend: ", chorus_status_name(status), ": ",
                    error);
        return result;
    }

    // The bytes of a contiguous tensor, as a uint8 tensor over the same memory.
    static at::Tensor as_bytes(const at::Tensor &tensor) {
        return at::from_blob(tensor.data_ptr(), {tensor.numel() * tensor.element_size()},
                             [tensor](void *) {}, at::TensorOptions().dtype(at::kByte));
    }

    // A receive into `tensor` (through a contiguous copy where it is not contiguous).
    c10::intrusive_ptr<c10d::Work> receive(at::Tensor tensor, int job_source, int tag,
                                           c10d::OpType type) {
        check_cpu(tensor, "recv");
        at::Tensor buffer = tensor.contiguous();
        auto operation = std::make_shared<Operation>();
        operation->outputs = {tensor};
        operation->keep_alive = {buffer};
        std::vector<int64_t> job_ranks = job_ranks_;
        operation->finish = [tensor, buffer, job_ranks](Operation &done) mutable {
            int sender = chorus_handle_source(done.handle);
            for (size_t r = 0; r < job_ranks.size(); r++)
                if (job_ranks[r] == sender)
                    done.source = static_cast<int>(r);
            if (!buffer.is_same(tensor))
                tensor.copy_(buffer);
        };
        chorus_tensor described = flat(buffer);
        chorus_status status = chorus_recv_async(&described, job_source, tag, process_set_,
                                                 &operation->handle);
        TORCH_CHECK(status == CHORUS_OK, "chorus backend: recv: ", chorus_status_name(status),
                    ": ", chorus_last_error());
        return c10::make_intrusive<WorkChorus>(std::move(operation), getRank(), type);
    }

    void check_root(int64_t root, const char *call) const {
        TORCH_CHECK(root >= 0 && root < getSize(), "chorus backend: ", call, " root ", root,
                    " is not a rank of the group (", getSize(), " ranks)");
    }

    chorus_op_args base_args(chorus_collective collective, chorus_tensor input) const {
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.collective = collective;
        args.name = nullptr;
        args.input = input;
        args.process_set = process_set_;
        args.flags = CHORUS_OP_ORDERED;
        args.timeout_seconds = timeout_seconds_;
        return args;
    }

    static void copy_bytes_into(at::Tensor &out, const void *bytes, size_t count) {
        if (count == 0)
            return;
        if (out.is_contiguous()) {
            std::memcpy(out.data_ptr(), bytes, count);
            return;
        }
        at::Tensor staged = at::empty(out.sizes(), out.options());
        std::memcpy(staged.data_ptr(), bytes, count);
        out.copy_(staged);
    }

    // After an allgather or reducescatter: the handle's output, cut into the operation's outputs
    // one after the other (all of it into a single output).
    static void copy_output_in_order(Operation &done) {
        chorus_tensor produced{};
        chorus_handle_output(done.handle, &produced);
        const char *at = static_cast<const char *>(produced.data);
        for (auto &output : done.outputs) {
            size_t bytes = output.numel() * output.element_size();
            copy_bytes_into(output, at, bytes);
            at += bytes;
        }
    }

    // An allgather of `input` whose result lands in `outputs` in rank order (none: dropped).
    c10::intrusive_ptr<c10d::Work> allgather_into(const at::Tensor &input,
                                                  std::vector<at::Tensor> outputs,
                                                  c10d::OpType type) {
        at::Tensor contiguous = input.contiguous();
        auto operation = std::make_shared<Operation>();
        operation->outputs = std::move(outputs);
        operation->keep_alive = {contiguous};
        operation->finish = copy_output_in_order;
        return submit(base_args(CHORUS_ALLGATHER, flat(contiguous)), operation, type);
    }

    c10::intrusive_ptr<c10d::Work> submit(const chorus_op_args &args,
                                          std::shared_ptr<Operation> operation,
                                          c10d::OpType type) {
        chorus_status status = chorus_submit(&args, &operation->handle);
        TORCH_CHECK(status == CHORUS_OK, "chorus backend: ", chorus_status_name(status), ": ",
                    chorus_last_error());
        // A small operation on one host completes inside chorus_submit: finished here, its
        // Work's wait() has nothing left to do.
        if (chorus_test(operation->handle) != CHORUS_IN_PROGRESS)
            operation->complete();
        return c10::make_intrusive<WorkChorus>(std::move(operation), getRank(), type);
    }

    // An allreduce (root < 0) or a reduce to `root`, in place on `tensor`.
    c10::intrusive_ptr<c10d::Work> reduce_in_place(at::Tensor tensor, chorus_op op, int root,
                                                   c10d::OpType type) {
        if (root >= 0)
            check_root(root, "reduce");
        // A reduce leaves the other ranks' tensors as they were: they reduce a copy.
        bool copy = !tensor.is_contiguous() || (root >= 0 && root != getRank());
        at::Tensor buffer = copy ? tensor.contiguous().clone() : tensor;
        auto operation = std::make_shared<Operation>();
        operation->outputs = {tensor};
        if (copy)
            operation->keep_alive = {buffer};
        if (copy && root < 0)
            operation->finish = [tensor, buffer](Operation &) mutable { tensor.copy_(buffer); };
        else if (copy && !tensor.is_contiguous() && root == getRank())
            operation->finish = [tensor, buffer](Operation &) mutable { tensor.copy_(buffer); };
        chorus_op_args args = base_args(CHORUS_ALLREDUCE, flat(buffer));
        args.op = op;
        return submit(args, operation, type);
    }

    // Reducescatter of `input` (size x output's elements, contiguous) into `output`.
    c10::intrusive_ptr<c10d::Work> reduce_scatter_rows(at::Tensor input, at::Tensor output,
                                                       chorus_op op, c10d::OpType type) {
        auto operation = std::make_shared<Operation>();
        operation->outputs = {output};
        operation->keep_alive = {input};
        operation->finish = copy_output_in_order;
        chorus_tensor rows{};
        rows.data = input.data_ptr();
        rows.dtype = dtype_of(input);
        rows.ndims = 2;
        rows.shape[0] = getSize();
        rows.shape[1] = output.numel();
        chorus_op_args args = base_args(CHORUS_REDUCESCATTER, rows);
        args.op = op;
        return submit(args, operation, type);
    }

    // Alltoall of a flat `send` with `splits` elements per rank, into `output` (flat order).
    c10::intrusive_ptr<c10d::Work> alltoall_rows(at::Tensor send, std::vector<int64_t> splits,
                                                 at::Tensor output, c10d::OpType type) {
        auto operation = std::make_shared<Operation>();
        operation->outputs = {output};
        operation->keep_alive = {send};
        operation->finish = [](Operation &done) {
            chorus_tensor received{};
            chorus_handle_output(done.handle, &received);
            at::Tensor &out = done.outputs[0];
            TORCH_CHECK(received.shape[0] == out.numel(), "all_to_all_single: ",
                        received.shape[0], " elements arrived for an output of ", out.numel());
            copy_bytes_into(out, received.data, out.numel() * out.element_size());
        };
        chorus_op_args args = base_args(CHORUS_ALLTOALL, flat(send));
        args.splits = splits.data();
        return submit(args, operation, type);
    }

    int process_set_;
    std::vector<int64_t> job_ranks_; // the group's ranks in the job, by group rank
    double timeout_seconds_;         // the group's timeout=, or 0: CHORUS_TIMEOUT_SECONDS
    int generation_ = 0;             // this group's number among those made over its set
};

} // namespace

PYBIND11_MODULE(_chorus_c10d, module) {
    using Group = const c10::intrusive_ptr<ProcessGroupChorus>;
    using WithoutGil = py::call_guard<py::gil_scoped_release>;
    module.doc() = "chorus as a torch.distributed backend (see chorus.torch.distributed)";
    py::object base = py::module::import("torch.distributed").attr("ProcessGroup");
    // Registered so that returning a Work finds its Python type at once (an unregistered
    // subclass costs pybind a failed lookup per call before it falls back to Work).
    // Its wait(), called from Python, skips what torch's binding of Work.wait does per call
    // (the timeout's timedelta converted, the GIL released) where the operation has already
    // completed, as a small one on one host has inside chorus_submit.
    py::class_<WorkChorus, c10d::Work, c10::intrusive_ptr<WorkChorus>>(module, "WorkChorus")
        .def(
            "wait",
            [](WorkChorus &self, const py::object & /* timeout: the group's bound applies */) {
                if (self.completed())
                    return self.wait(std::chrono::milliseconds(0));
                py::gil_scoped_release released;
                return self.wait(std::chrono::milliseconds(0));
            },
            py::arg("timeout") = py::none());
    py::class_<ProcessGroupChorus, c10::intrusive_ptr<ProcessGroupChorus>>(
        module, "ProcessGroupChorus", base)
        .def(py::init<int, int, int, std::vector<int64_t>, double>(), py::arg("rank"),
             py::arg("size"), py::arg("process_set"), py::arg("job_ranks"),
             py::arg("timeout_seconds") = 0.0)
        // torch's own bindings of these calls (ProcessGroup's) go through the dispatcher
        // (c10d::ops), which costs a small dist.all_reduce a fifth of its time; called from
        // Python, chorus's group runs them directly, with the same overloads.
        .def(
            "allreduce",
            [](Group &self, std::vector<at::Tensor> &tensors,
               const c10d::AllreduceOptions &opts) { return self->allreduce(tensors, opts); },
            py::arg("tensors"), py::arg("opts") = c10d::AllreduceOptions(), WithoutGil())
        .def(
            "allreduce",
            [](Group &self, std::vector<at::Tensor> &tensors, c10d::ReduceOp op) {
                c10d::AllreduceOptions opts;
                opts.reduceOp = op;
                return self->allreduce(tensors, opts);
            },
            py::arg("tensors"), py::arg("op") = c10d::ReduceOp::SUM, WithoutGil())
        .def(
            "allreduce",
            [](Group &self, at::Tensor &tensor, c10d::ReduceOp op) {
                c10d::AllreduceOptions opts;
                opts.reduceOp = op;
                std::vector<at::Tensor> tensors = {tensor};
                return self->allreduce(tensors, opts);
            },
            py::arg("tensor"), py::arg("op") = c10d::ReduceOp::SUM, WithoutGil())
        .def(
            "broadcast",
            [](Group &self, std::vector<at::Tensor> &tensors,
               const c10d::BroadcastOptions &opts) { return self->broadcast(tensors, opts); },
            py::arg("tensors"), py::arg("opts") = c10d::BroadcastOptions(), WithoutGil())
        .def(
            "broadcast",
            [](Group &self, at::Tensor &tensor, int64_t root) {
                c10d::BroadcastOptions opts;
                opts.rootRank = root;
                std::vector<at::Tensor> tensors = {tensor};
                return self->broadcast(tensors, opts);
            },
            py::arg("tensor"), py::arg("root"), WithoutGil())
        .def(
            "barrier",
            [](Group &self, const c10d::BarrierOptions &opts) { return self->barrier(opts); },
            py::arg("opts") = c10d::BarrierOptions(), WithoutGil());
}

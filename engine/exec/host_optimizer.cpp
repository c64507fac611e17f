#include "engine/exec/host_optimizer.h"

#include "engine/cpu/optim.h"
#include "engine/exec/exec_error.h"

namespace shardscope::engine::exec {

void host_optimizer_step(const plan::OptimizerConfig& o, float* p, const float* grad, float* state,
                         int64_t n, int64_t step) {
  switch (o.type) {
    case plan::OptimizerType::adamw: {
      if (!state) throw ExecError("adamw optimizer op without its state buffer");
      const cpu::AdamWParams h{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
      cpu::adamw_step(p, grad, state, state + n, n, h, step);
      return;
    }
    case plan::OptimizerType::sgd: {
      const cpu::SgdParams h{o.lr, o.momentum, o.weight_decay};
      cpu::sgd_step(p, grad, o.momentum > 0 ? state : nullptr, n, h, step);
      return;
    }
  }
}

}  // namespace shardscope::engine::exec

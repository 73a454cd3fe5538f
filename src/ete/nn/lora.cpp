// ete/nn/lora.cpp — the adapter's scale (nn/lora.h); the adapter's products live in Linear.
#include "ete/nn/lora.h"

#include <cmath>

#include "ete/core/error.h"

namespace ete {

float lora_scale(float alpha, int r, bool rslora) {
    ETE_ASSERT(r > 0);
    return rslora ? alpha / std::sqrt(float(r)) : alpha / float(r);
}

}  // namespace ete

// Shared by every module: integer names, f16/bf16 conversion without headers (NVRTC has no
// toolkit include path), unaligned loads, warp reductions and the FFN gate (one formula for
// the fused and the unfused kernel).
typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define WARP 32

// Programmatic dependent launch, before a kernel's first access to anything a kernel writes:
// wait until the grid before has finished (its writes visible), then let the next one
// launch, so a launch and its first blocks overlap the tail of the kernel before. Only
// weights and the forward's metadata (uploaded before its first kernel) are read ahead of it.
// No-ops in a launch without it.
#if __CUDA_ARCH__ >= 900
#define PDL_ENTER() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define PDL_ENTER()
#endif
#define INFINITY __int_as_float(0x7f800000)

// Asks L2 for bytes [p, p + n) (p and n multiples of 16) without holding a register while
// they arrive: a hint, so the loads that follow wait on L2 instead of DRAM.
__device__ __forceinline__ void prefetch_l2(const void* p, u32 n) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
#else
    for (u32 o = 0; o < n; o += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"((const u8*)p + o));
#endif
}

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }

// unaligned little-endian loads: block fields sit at 2-byte offsets in most layouts
__device__ __forceinline__ u16 ld_u16(const u8* p) { return (u16)p[0] | ((u16)p[1] << 8); }
__device__ __forceinline__ float ld_f16(const u8* p) { return f16_to_f32(ld_u16(p)); }
__device__ __forceinline__ u32 ld_u32(const u8* p) {
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// the FFN's gate: act 0 silu(g) * u, act 1 gelu_tanh(g) * u (the CPU's formulas)
__device__ __forceinline__ float glu_of(float g, float u, int act) {
    if (act == 0) return g / (1.0f + expf(-g)) * u;
    const float c = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g))) * u;
}

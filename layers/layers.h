// layers/: the public header of the folder. The Transformer layers (EmbeddingLayer, EncoderLayer,
// DecoderLayer, CriterionLayer, the encoder's and decoder's shared sub-layers, the layer-batched
// cross-attention K/V of a decoder stack, the eager-like BaselineEncoderLayer and
// BaselineDecoderLayer with their shared eager sub-layers and caching allocator) and what they are
// built on: the cuBLASLt GEMM, the layer configuration and model presets, the device-allocation
// interface that counts every allocation, the dangling-tensor memory planner and manager
// (LightSeq2 §IV-D), and the dry runs that describe each layer's temporaries to the planner.
#pragma once

#include "layers/attention_sublayer.h"
#include "layers/baseline_decoder_layer.h"
#include "layers/baseline_encoder_layer.h"
#include "layers/baseline_encoder_stack.h"
#include "layers/caching_allocator.h"
#include "layers/config.h"
#include "layers/criterion_layer.h"
#include "layers/cross_kv.h"
#include "layers/decoder_layer.h"
#include "layers/device_allocator.h"
#include "layers/embedding_layer.h"
#include "layers/encoder_layer.h"
#include "layers/encoder_stack.h"
#include "layers/ffn_sublayer.h"
#include "layers/gemm.h"
#include "layers/gemm_shapes.h"
#include "layers/layer_run.h"
#include "layers/layer_temporaries.h"
#include "layers/memory_planner.h"

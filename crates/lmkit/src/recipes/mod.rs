//! Recipes: what to train, on top of the `train` layer — data + model +
//! loss for GPT-2 pretraining, BERT pretraining (MLM + NSP) and
//! fine-tuning (classification, span QA, causal LM).

pub mod bert_pretrain;
pub mod finetune;

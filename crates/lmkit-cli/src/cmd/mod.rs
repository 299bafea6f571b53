//! One module per subcommand.

pub mod classify;
pub mod embed;
pub mod eval;
pub mod fill_mask;
pub mod finetune;
pub mod generate;
pub mod perplexity;
pub mod plot;
pub mod pretrain;
pub mod qa;
pub mod quickstart;
pub mod tokenize;
pub mod train_tokenizer;

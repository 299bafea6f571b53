//! One module per subcommand.

pub mod plot;
pub mod pretrain;
pub mod quickstart;
pub mod tokenize;
pub mod train_tokenizer;
pub mod generate;
pub mod perplexity;

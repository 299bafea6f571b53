//! One module per subcommand.
pub mod tokenize;
pub mod train_tokenizer;
pub mod generate;
pub mod perplexity;

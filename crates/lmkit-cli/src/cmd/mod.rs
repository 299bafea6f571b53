//! One module per subcommand.
pub mod tokenize;
pub mod train_tokenizer;

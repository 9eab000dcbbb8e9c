pub mod check;
pub mod inventory;
pub mod run;

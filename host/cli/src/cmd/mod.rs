pub mod check;
pub mod inventory;
pub mod ptx;
pub mod run;
